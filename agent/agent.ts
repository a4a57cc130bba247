import { networkInterfaces } from 'node:os';
import type { CryptoKey } from 'jose';
import { createMachineCredentials } from './credentials.js';
import { lazyGpuIndices } from './inventory/gpus.js';
import { createInvocationRunner } from './invocations/runner.js';
import { createCatchUp } from './link/catch-up.js';
import { createServerClock } from './link/clock.js';
import { createDesiredIntake, verifyDesiredState } from './link/desired.js';
import { createSignedClient } from './link/http.js';
import { openStreamLink } from './link/stream.js';
import { createUplink } from './link/uplink.js';
import { jsonLog, type Log } from './log.js';
import type { PolicySource } from './policy-file.js';
import { proxyDispatcher } from './proxy.js';
import { machineAddress } from './reporter/address.js';
import { observeMachine, type AgentCounters } from './reporter/observe.js';
import { type EngineSource, TelemetrySampler } from './telemetry/sampler.js';
import { sampleGpus } from './inventory/index.js';
import { LOAD_REPORT_SPACING_MS, Reporter } from './reporter/reporter.js';
import { cachedVersions, createAdapters } from './runtimes/adapters.js';
import { MachineHolds } from './runtimes/holds.js';
import { prepareRun } from './startup.js';
import { saveHeldGen, type AgentIdentity } from './state.js';
import { createStreamEvents } from './stream-events.js';
import type { Uplink } from './link/uplink.js';
import { Supervisor } from './supervisor/supervisor.js';
import { AGENT_VERSION } from './version.js';
import { WorkerSupervisor } from './workers/supervisor.js';
import { runnerJobEnv } from './workers/job-env.js';

export interface RunningAgent {
  /** Resolves with why the agent stopped. */
  done: Promise<'stopped' | 'revoked'>;
  stop(): Promise<void>;
}

/** A new uplink not confirmed down the stream by then is taken for buffered by a proxy: answers go per invocation. */
export const UPLINK_CONFIRM_MS = 3_000;
/** Under the 300 s in which Node (and many proxies) want a request body complete: the uplink is replaced before. */
export const UPLINK_MAX_AGE_MS = 240_000;

/** The clock measured, then the credentials and the client that signs in its time. */
async function signIn(opts: { stateDir: string; identity: AgentIdentity; key: CryptoKey; log: Log }) {
  const dispatcher = proxyDispatcher();
  const clock = createServerClock({ baseUrl: opts.identity.url, dispatcher, log: opts.log });
  // Before anything is signed: a machine whose clock is off would be refused until it signs in corrected time.
  await clock.measure('start');
  const machine = createMachineCredentials({ ...opts, clock });
  const client = createSignedClient({ baseUrl: opts.identity.url, credentials: machine.current, dispatcher, clock });
  return { dispatcher, clock, machine, client };
}

/** The ready runtimes whose engine metrics can be read, each through its own adapter. */
function engineSources(supervisor: Pick<Supervisor, 'reports' | 'readyHandle'>): EngineSource[] {
  return supervisor.reports().flatMap(({ assignmentId }) => {
    const target = supervisor.readyHandle(assignmentId);
    if (!target.ok || !target.adapter.metrics || !target.handle.metricsPath) return [];
    const { adapter, handle } = target;
    return [{ assignmentId, read: () => adapter.metrics!(handle) }];
  });
}

/**
 * Stops the parts in order. A revoked machine is cut off at once, and no longer trusted with its desired state:
 * its runtimes stop too. A stopping one reports `draining` and lets its in-flight invocations finish (bounded),
 * with the link and the heartbeats still going; the invocations sent meanwhile are refused before any head and
 * retried elsewhere.
 */
async function stopParts(
  parts: { reporter: Reporter; link: { close(): void }; uplink: Uplink; supervisor: Supervisor; workers: WorkerSupervisor; catchUp: { close(): void } },
  revoked: boolean,
  stopRuntimes: boolean,
) {
  const { reporter, link, uplink, supervisor } = parts;
  if (revoked) {
    reporter.halt();
    link.close();
    uplink.stop();
  }
  const supervised = supervisor.shutdown({ stopRuntimes: revoked || stopRuntimes, drain: !revoked });
  const workersStopped = parts.workers.shutdown({ stopWorkers: revoked || stopRuntimes });
  if (!revoked) await reporter.report();
  await supervised;
  await workersStopped;
  const reported = reporter.close();
  parts.catchUp.close();
  link.close();
  uplink.stop();
  await reported;
}

/**
 * `lunanexa-agent run`: the dial-out link, the reporter and the supervisor of one machine, with the invocation
 * runner between link and runtimes.
 */
export async function runAgent(opts: {
  stateDir: string;
  policy: PolicySource;
  stopRuntimesOnExit?: boolean;
  /** `off` sends every answer on an upload of its own (the fallback), never up the uplink. */
  uplink?: 'auto' | 'off';
  log?: Log;
  /** The address heartbeats give (LUNANEXA_AGENT_ADDRESS); absent: the machine's first non-internal IPv4. */
  address?: string;
  /** The nvidia-smi that lists the GPUs runtimes and workers reserve (LUNANEXA_AGENT_NVIDIA_SMI). */
  nvidiaSmi?: string;
  /** How many finished workers' logs are kept after their release (LUNANEXA_AGENT_KEPT_WORKER_LOGS). */
  keptWorkerLogs?: number;
  /** How often GPUs and engines are sampled for the heartbeats (LUNANEXA_AGENT_TELEMETRY_MS); 0: never. */
  telemetryMs?: number;
}): Promise<RunningAgent> {
  const log = opts.log ?? jsonLog;
  const start = await prepareRun({ stateDir: opts.stateDir, policy: opts.policy, log });
  const { stateDir, identity } = start;
  const baseUrl = identity.url;
  const { dispatcher, clock, machine, client } = await signIn({ stateDir, identity, key: start.key, log });

  // One ledger of GPUs and uids for runtimes and run workers: neither gets what the other holds.
  const holds = new MachineHolds(stateDir, lazyGpuIndices(AGENT_VERSION, opts.nvidiaSmi));
  const workers = new WorkerSupervisor({
    stateDir,
    policy: start.loaded.policy,
    users: start.users,
    holds,
    onChange: () => reporter.soon(),
    log,
    keptLogs: opts.keptWorkerLogs,
    jobEnv: (assignment) => runnerJobEnv(client, baseUrl, assignment),
  });
  // Before the link exists: the first desired state must find the workers an earlier agent left.
  await workers.recover();

  // From here on the wiring is synchronous: the reporter, the runner, the supervisor and the link refer to one
  // another, and none of them may act before all exist.
  const counters: AgentCounters = { desired_rejected_total: 0, stream_malformed_total: 0, stream_connects_total: 0, heartbeat_failures_total: 0 };
  let finish!: (reason: 'stopped' | 'revoked') => void;
  const done = new Promise<'stopped' | 'revoked'>((r) => (finish = r));
  /** Shutting down: no new desired state or work; heartbeats go on (saying `draining`) until the reporter closes. */
  let stopping = false;

  const reporter: Reporter = new Reporter({
    client,
    clock,
    intervalMs: identity.heartbeatIntervalMs,
    observe: () =>
      observeMachine({
        machineId: identity.machineId,
        supervisor,
        workers,
        address: machineAddress(opts.address, networkInterfaces()),
        heldGen: desired.heldGen(),
        cachedVersions: cachedVersions(adapters),
        invocationsActive: invocations.active(),
        counters,
        telemetry,
      }),
    onAccepted: (reply) => catchUp.announced(reply.desiredGen),
    onRevoked: () => void shutdown('revoked'),
    afterKeepAlive: async () => {
      if (!stopping) await machine.maybeRotate(client).catch((error: unknown) => log('credential rotation failed', { error: String(error) }));
      if (!stopping && clock.due()) void clock.measure('periodic');
    },
    counters,
    log,
  });

  const uplink = createUplink({ baseUrl, dispatcher, signedHeaders: client.signedHeaders, confirmMs: UPLINK_CONFIRM_MS, maxAgeMs: UPLINK_MAX_AGE_MS, log });
  const invocations = createInvocationRunner({
    baseUrl,
    dispatcher,
    signedHeaders: client.signedHeaders,
    uplink,
    runtime: (assignmentId) => supervisor.readyHandle(assignmentId),
    onLoadChange: (_assignmentId, edge) => reporter.soon(edge ? undefined : LOAD_REPORT_SPACING_MS),
    log,
  });

  const adapters = createAdapters({ stateDir, policy: start.loaded.policy, users: start.users, holds, log });
  const supervisor: Supervisor = new Supervisor({ adapters, onChange: reporter.soon, load: (assignmentId) => invocations.load(assignmentId), log });
  supervisor.start();
  workers.start();
  const telemetry = new TelemetrySampler({
    intervalMs: opts.telemetryMs ?? 5_000,
    gpus: () => sampleGpus({ nvidiaSmi: opts.nvidiaSmi }),
    engines: () => engineSources(supervisor),
    log,
  });
  telemetry.start();

  const desired = createDesiredIntake({
    heldGen: start.heldGen,
    verify: (jws, heldGen) => {
      const { jwks, machineId, clusterId } = machine.identity();
      return verifyDesiredState({ jws, jwks, machineId, clusterId, heldGen, now: new Date(clock.now()) });
    },
    save: (gen) => saveHeldGen(stateDir, gen),
    apply: (state) => {
      supervisor.apply(state.gen, state.assignments);
      workers.apply(state.workers);
    },
    onRejected: (reason) => {
      counters.desired_rejected_total += 1;
      log('desired state rejected', { reason });
      reporter.soon();
    },
    log,
  });

  const link = openStreamLink({
    baseUrl,
    dispatcher,
    signedHeaders: client.signedHeaders,
    silenceTimeoutMs: 45_000,
    ...createStreamEvents({
      client,
      clock,
      uplink,
      uplinkMode: opts.uplink ?? 'auto',
      invocations,
      desired,
      supervisor,
      workers,
      stopping: () => stopping,
      onRevoked: () => void shutdown('revoked'),
      counters,
      log,
    }),
  });
  const catchUp = createCatchUp({ heldGen: desired.heldGen, busy: desired.busy, stopping: () => stopping, link });

  async function shutdown(reason: 'stopped' | 'revoked') {
    if (stopping) return;
    stopping = true;
    telemetry.close();
    await stopParts({ reporter, link, uplink, supervisor, workers, catchUp }, reason === 'revoked', opts.stopRuntimesOnExit ?? false);
    finish(reason);
  }

  reporter.start();
  return { done, stop: () => shutdown('stopped') };
}
