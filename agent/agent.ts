import { hostname, loadavg, freemem } from 'node:os';
import { resolve } from 'node:path';
import { fetch } from 'undici';
import { EnrollResponse, HeartbeatResponse, RotateCredentialResponse } from '../shared/contracts/index.js';
import type { Heartbeat } from '../shared/contracts/heartbeat.js';
import { z } from 'zod';
import { canonicalize } from '../shared/canonical.js';
import { collectInventory } from './inventory/index.js';
import { proxyDispatcher, createSignedClient, readResult, type MachineCredentials } from './link/http.js';
import { openStreamLink } from './link/stream.js';
import { unreachableMessage } from './link/reachability.js';
import { createInvocationRunner } from './link/invocations.js';
import { createUplink } from './link/uplink.js';
import { createDesiredIntake, verifyDesiredState } from './link/desired.js';
import { createServerClock } from './link/clock.js';
import { afterReportFailure, firstReportDelayMs, keepAliveDelayMs, retryDelayMs } from './link/schedule.js';
import { Supervisor } from './supervisor/supervisor.js';
import { createAdapters } from './runtimes/adapters.js';
import { allowsNothing } from './policy.js';
import { loadPolicy, type LoadedPolicy, type PolicySource } from './policy-file.js';
import { runtimeUser, type RuntimeUser } from './runtime-user.js';
import {
  ensureStateDir,
  generateMachineKey,
  loadHeldGen,
  loadIdentity,
  loadKey,
  promoteNextKey,
  saveHeldGen,
  saveIdentity,
  saveKey,
  secureStateDir,
  type AgentIdentity,
} from './state.js';

import { PingAnswered } from '../shared/contracts/stream.js';

export const AGENT_VERSION = '0.1.0';

const LogUploadAccepted = z.object({ accepted: z.literal(true) });

type Log = (event: string, fields?: Record<string, unknown>) => void;

/** One JSON line per event on stderr; never payloads, never keys or tokens. */
export const jsonLog: Log = (event, fields = {}) => {
  process.stderr.write(`${JSON.stringify({ time: new Date().toISOString(), event, ...fields })}\n`);
};

/**
 * `lunanexa-agent enroll`: generates the machine key locally (0600, never sent), collects inventory and trades
 * the single-use enrollment token for a machine identity, pinning the control plane's JWKS.
 */
export async function enrollAgent(opts: { url: string; token: string; name?: string; stateDir: string; log?: Log }): Promise<AgentIdentity> {
  const stateDir = resolve(opts.stateDir);
  if (await loadIdentity(stateDir)) throw new Error(`${stateDir} already holds an enrolled identity`);
  await ensureStateDir(stateDir);
  const key = await generateMachineKey();
  const inventory = await collectInventory({ agentVersion: AGENT_VERSION });
  const name = opts.name ?? hostname().toLowerCase().replace(/[^a-z0-9-]/g, '-').slice(0, 63);
  const dispatcher = proxyDispatcher();
  const response = await fetch(new URL('/agent/v1/enroll', opts.url), {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    // No labels: a machine does not choose its own (they come with the enrollment token, or from an operator).
    body: canonicalize({ token: opts.token, name, publicKey: key.publicJwk, inventory }),
    // The body carries the token: a redirect (307 keeps the body) must never hand it to another server.
    redirect: 'manual',
    dispatcher,
  }).catch((error: unknown) => {
    throw new Error(unreachableMessage(opts.url, error), { cause: error });
  });
  const result = await readResult(response, EnrollResponse);
  if (!result.success) throw new Error(`enrollment failed: ${result.error.code}: ${result.error.message}`);
  // Enrollment signs nothing, but the operator setting the machine up is told of a wrong clock now, and the
  // credential's issue time is the control plane's, like its expiry.
  const clock = createServerClock({ baseUrl: opts.url, dispatcher, log: opts.log ?? jsonLog });
  await clock.measure('enrollment');
  await saveKey(stateDir, key.privateJwk);
  const identity: AgentIdentity = {
    url: opts.url,
    name,
    machineId: result.data.machineId,
    workspaceId: result.data.workspaceId,
    clusterId: result.data.clusterId,
    credentialId: result.data.credentialId,
    credentialIssuedAt: new Date(clock.now()).toISOString(),
    credentialExpiresAt: result.data.credentialExpiresAt,
    jwks: result.data.jwks,
    heartbeatIntervalMs: result.data.heartbeatIntervalMs,
  };
  await saveIdentity(stateDir, identity);
  return identity;
}

export interface RunningAgent {
  /** Resolves with why the agent stopped. */
  done: Promise<'stopped' | 'revoked'>;
  stop(): Promise<void>;
}

/** Shortest spacing of heartbeats sent on a change: a burst of changes (invocations under load) becomes one report. */
const REPORT_SPACING_MS = 250;

/** How long an open link may take to deliver a generation the control plane announced in a heartbeat reply. */
const REFETCH_GRACE_MS = 2_000;
/** A new uplink not confirmed down the stream by then is taken for buffered by a proxy: answers go per invocation. */
const UPLINK_CONFIRM_MS = 3_000;
/** Under the 300 s in which Node (and many proxies) want a request body complete: the uplink is replaced before. */
const UPLINK_MAX_AGE_MS = 240_000;

/** Says once, at start, what the local policy lets run here and as whom; above all when that is nothing. */
function logPolicy(log: Log, loaded: LoadedPolicy, root: boolean, user: RuntimeUser | null): void {
  const { policy } = loaded;
  log('local policy', {
    path: loaded.path,
    found: loaded.found,
    templates: Object.keys(policy.templates),
    simulated: policy.simulated,
    artifactRoots: policy.artifactRoots,
    runtimeUser: user?.name ?? null,
  });
  if (!loaded.found) log('nothing will run on this node', { reason: `no local policy at ${loaded.path}: without one the agent accepts no runtime template and not the simulated runtime` });
  else if (allowsNothing(policy)) log('nothing will run on this node', { reason: `the local policy ${loaded.path} allows no runtime template and not the simulated runtime` });
  else if (!user) log('nothing will run on this node', { reason: 'the agent runs as root and the local policy names no runAs user to run runtimes as' });
  else if (!root) log('runtimes run as this agent\'s own user', { user: user.name, reason: 'not root, the agent cannot switch users: its runtimes can read its state dir and key' });
}

/** `lunanexa-agent run`: the dial-out link, the reporter and the supervisor of one machine. */
export async function runAgent(opts: {
  stateDir: string;
  policy: PolicySource;
  stopRuntimesOnExit?: boolean;
  /** `off` sends every answer on an upload of its own (the fallback), never up the uplink. */
  uplink?: 'auto' | 'off';
  log?: Log;
}): Promise<RunningAgent> {
  const log = opts.log ?? jsonLog;
  const stateDir = resolve(opts.stateDir);
  let identity = await loadIdentity(stateDir);
  if (!identity) throw new Error(`${stateDir} holds no identity: run \`lunanexa-agent enroll\` first`);
  const loaded = await loadPolicy(opts.policy);
  const root = process.getuid?.() === 0;
  const user = await runtimeUser(loaded.policy, root);
  const loosened = await secureStateDir(stateDir, user?.ids?.uid ?? null);
  if (loosened.length > 0) log('state dir made private again', { paths: loosened });
  logPolicy(log, loaded, root, user);
  let gpus: Promise<number[]> | undefined;
  /** Read once, when a runtime first asks for GPUs: a machine without any never waits on nvidia-smi for it. */
  const gpuIndices = () =>
    (gpus ??= collectInventory({ agentVersion: AGENT_VERSION }).then(
      (inventory) => inventory.gpus.map((gpu) => gpu.index),
      (error: unknown) => {
        // The launch that asked fails with this error; the next one asks again.
        gpus = undefined;
        throw error;
      },
    ));
  const dispatcher = proxyDispatcher();
  let credentials: MachineCredentials = { machineId: identity.machineId, clusterId: identity.clusterId, credentialId: identity.credentialId, key: await loadKey(stateDir) };
  const clock = createServerClock({ baseUrl: identity.url, dispatcher, log });
  // Before anything is signed: a machine whose clock is off would be refused until it signs in corrected time.
  await clock.measure('start');
  const client = createSignedClient({ baseUrl: identity.url, credentials: () => credentials, dispatcher, clock });
  const bootId = crypto.randomUUID();
  let seq = 0;
  const initialGen = await loadHeldGen(stateDir);
  // From here on the wiring is synchronous: the reporter, the runner, the supervisor and the link refer to one
  // another, and none of them may act before all exist.
  let intervalMs = identity.heartbeatIntervalMs;
  const counters = { desired_rejected_total: 0, stream_malformed_total: 0, stream_connects_total: 0, heartbeat_failures_total: 0 };
  let finish!: (reason: 'stopped' | 'revoked') => void;
  const done = new Promise<'stopped' | 'revoked'>((r) => (finish = r));
  /** Shutting down: no new desired state or work; heartbeats go on (saying `draining`) until `closed`. */
  let stopping = false;
  let closed = false;
  /** The newest generation the control plane announced in a heartbeat reply that made the link refetch. */
  let refetchedGen = 0;

  let reporting: Promise<void> | null = null;
  let reportAgain = false;
  let lastReportAt = 0;
  /** Consecutive failed reports: the backoff of their retries. */
  let failedReports = 0;
  let retryTimer: NodeJS.Timeout | undefined;
  /** performance.now() of the next keep-alive, which supersedes a retry due after it. */
  let nextKeepAliveAt = 0;

  /** Sends one heartbeat of fresh observations; after a failure, says whether to retry. */
  const sendHeartbeat = async (): Promise<'sent' | ReturnType<typeof afterReportFailure>> => {
    const heartbeat: Heartbeat = {
      machineId: identity!.machineId,
      bootId,
      seq: ++seq,
      status: supervisor.status(),
      gen: desired.heldGen(),
      runtimes: supervisor.reports(),
      warmModels: supervisor.warmModels(),
      cachedVersions: cachedVersions(),
      metrics: { load1: loadavg()[0] ?? 0, mem_free_mib: Math.round(freemem() / 1048576), invocations_active: invocations.active(), ...counters },
    };
    const result = await client.request('POST', '/agent/v1/heartbeat', heartbeat, HeartbeatResponse);
    if (result.success) {
      intervalMs = result.data.heartbeatIntervalMs;
      refetchIfBehind(result.data.desiredGen);
      return 'sent';
    }
    counters.heartbeat_failures_total += 1;
    log('heartbeat rejected', { status: result.status, code: result.error.code, message: result.error.message });
    if (result.error.code === 'machine_revoked') void shutdown('revoked');
    return afterReportFailure({ status: result.status, code: result.error.code });
  };

  /** A failed report is retried with backoff, unless the next keep-alive comes first and supersedes it. */
  const retryReport = () => {
    const delayMs = retryDelayMs(failedReports, nextKeepAliveAt - performance.now(), intervalMs);
    if (delayMs === null || closed) return;
    retryTimer = setTimeout(() => {
      retryTimer = undefined;
      void report();
    }, delayMs);
  };

  const report = (): Promise<void> => {
    if (reporting) {
      reportAgain = true;
      return reporting;
    }
    reporting = (async () => {
      do {
        reportAgain = false;
        // This report supersedes a retry that was waiting.
        clearTimeout(retryTimer);
        retryTimer = undefined;
        lastReportAt = Date.now();
        const outcome = await sendHeartbeat();
        if (outcome === 'sent') failedReports = 0;
        else if (outcome !== 'drop') {
          failedReports += 1;
          if (outcome === 'resync') await clock.resync('the control plane refused a heartbeat for clock skew');
          retryReport();
        }
      } while (reportAgain && !closed);
    })().finally(() => (reporting = null));
    return reporting;
  };

  let refetchTimer: NodeJS.Timeout | undefined;
  /**
   * The control plane holds a newer generation than this agent: its `desired` event was lost, or the link waits
   * in a backoff. A link in a backoff reconnects at once. An open one gets a moment first, because the heartbeat
   * reply can beat the event on its way, and a reconnect fails the in-flight invocations of this machine on the
   * control plane. Refetched once per generation, and not while one is being verified: a state this agent refuses
   * must not have it reconnect on every heartbeat.
   */
  const refetchIfBehind = (announced: number) => {
    const behind = () => announced > desired.heldGen() && announced > refetchedGen && !desired.busy() && !stopping;
    const refetch = () => {
      refetchedGen = announced;
      link.refetch(`the control plane holds generation ${announced}, this agent ${desired.heldGen()}`);
    };
    if (!behind()) return;
    if (!link.isOpen()) return refetch();
    if (refetchTimer) return;
    refetchTimer = setTimeout(() => {
      refetchTimer = undefined;
      if (behind()) refetch();
    }, REFETCH_GRACE_MS);
  };

  let reportTimer: NodeJS.Timeout | undefined;
  /** Reports a change at once, but at most every REPORT_SPACING_MS. */
  const reportSoon = () => {
    if (reportTimer || closed) return;
    reportTimer = setTimeout(
      () => {
        reportTimer = undefined;
        void report();
      },
      Math.max(0, lastReportAt + REPORT_SPACING_MS - Date.now()),
    );
  };

  const uplink = createUplink({ baseUrl: identity.url, dispatcher, signedHeaders: client.signedHeaders, confirmMs: UPLINK_CONFIRM_MS, maxAgeMs: UPLINK_MAX_AGE_MS, log });
  const invocations = createInvocationRunner({
    baseUrl: identity.url,
    dispatcher,
    signedHeaders: client.signedHeaders,
    uplink,
    runtime: (assignmentId) => supervisor.readyHandle(assignmentId),
    onLoadChange: reportSoon,
    log,
  });

  const adapters = createAdapters({ stateDir, policy: loaded.policy, user, gpus: gpuIndices, log });
  /** The versions verified in the adapters' caches (both kinds share one adapter, hence one cache), each once. */
  const cachedVersions = () => [...new Set(Object.values(adapters).flatMap((adapter) => adapter.cachedVersions?.() ?? []))].sort().slice(0, 256);
  const supervisor = new Supervisor({
    adapters,
    onChange: reportSoon,
    load: (assignmentId) => invocations.load(assignmentId),
    log,
  });
  supervisor.start();

  const desired = createDesiredIntake({
    heldGen: initialGen,
    verify: (jws, heldGen) => verifyDesiredState({ jws, jwks: identity!.jwks, machineId: identity!.machineId, clusterId: identity!.clusterId, heldGen, now: new Date(clock.now()) }),
    save: (gen) => saveHeldGen(stateDir, gen),
    apply: (state) => supervisor.apply(state.gen, state.assignments),
    onRejected: (reason) => {
      counters.desired_rejected_total += 1;
      log('desired state rejected', { reason });
      reportSoon();
    },
    log,
  });

  const maybeRotate = async () => {
    const issued = Date.parse(identity!.credentialIssuedAt);
    const expires = Date.parse(identity!.credentialExpiresAt);
    if (clock.now() < issued + ((expires - issued) * 2) / 3) return;
    const next = await generateMachineKey();
    await saveKey(stateDir, next.privateJwk, true);
    const result = await client.request('POST', '/agent/v1/credentials', { publicKey: next.publicJwk }, RotateCredentialResponse);
    if (!result.success) {
      log('credential rotation failed', { code: result.error.code });
      return;
    }
    await promoteNextKey(stateDir);
    identity = { ...identity!, credentialId: result.data.credentialId, credentialIssuedAt: new Date(clock.now()).toISOString(), credentialExpiresAt: result.data.credentialExpiresAt };
    await saveIdentity(stateDir, identity);
    credentials = { ...credentials, credentialId: result.data.credentialId, key: next.privateKey };
    log('credential rotated', { credentialId: result.data.credentialId, expiresAt: result.data.credentialExpiresAt });
  };

  let heartbeatTimer: NodeJS.Timeout | undefined;
  /** The next keep-alive, `delayMs` from now; reports in between (changes, retries) do not move it. */
  const scheduleKeepAlive = (delayMs: number) => {
    nextKeepAliveAt = performance.now() + delayMs;
    heartbeatTimer = setTimeout(() => void keepAlive(), delayMs);
  };
  const keepAlive = async () => {
    if (closed) return;
    // Set before reporting: a retry of this report must know when the next keep-alive supersedes it.
    nextKeepAliveAt = performance.now() + keepAliveDelayMs(intervalMs);
    await report();
    if (!stopping) await maybeRotate().catch((error: unknown) => log('credential rotation failed', { error: String(error) }));
    if (!stopping && clock.due()) void clock.measure('periodic');
    if (!closed) scheduleKeepAlive(Math.max(0, nextKeepAliveAt - performance.now()));
  };

  /** The stream connection the control plane named in `hello`; pings are answered for it. */
  let connectionId: string | null = null;
  const answerPing = (connection: string, seq: number) => {
    void client
      .request('POST', '/agent/v1/pong', { connectionId: connection, seq }, PingAnswered)
      .then((result) => {
        if (!result.success) log('ping answer refused', { code: result.error.code });
      })
      .catch((error: unknown) => log('ping answer failed', { error: error instanceof Error ? error.message : String(error) }));
  };

  const link = openStreamLink({
    baseUrl: identity.url,
    dispatcher,
    signedHeaders: client.signedHeaders,
    silenceTimeoutMs: 45_000,
    onState: (state, detail) => {
      if (state === 'open') counters.stream_connects_total += 1;
      else {
        connectionId = null;
        // The instance that sent these invocations dropped them with the stream (its requests failed or were
        // retried elsewhere): running them on would serve nobody and hold the runtime. The uplink was bound to it.
        if (state === 'closed') {
          uplink.stop();
          invocations.abortAll('stream_lost');
        }
      }
      log(`stream ${state}`, detail ? { detail } : {});
    },
    onMalformed: (error) => {
      counters.stream_malformed_total += 1;
      log('stream message rejected', { error });
    },
    onFatal: (status) => {
      log('stream refused', { status });
      // Possibly for clock skew (the reason is in the body the link does not read): measuring costs little.
      if (status === 401) void clock.resync('the control plane refused the stream');
    },
    onEvent: (event) => {
      if (event.event === 'hello') {
        connectionId = event.data.connectionId;
        if (opts.uplink !== 'off') uplink.start();
      } else if (event.event === 'ping') {
        if (connectionId && !uplink.pong(event.data.seq)) answerPing(connectionId, event.data.seq);
      } else if (event.event === 'uplink') uplink.confirmed(event.data.uplinkId);
      else if (event.event === 'ack') uplink.acknowledged(event.data.offsets); else if (event.event === 'desired') {
        // A stopping agent takes no new state: its runtimes are draining or being left for the next one.
        if (!stopping) desired.offer(event.data.jws);
      } else if (event.event === 'invoke') {
        // The deadline is the control plane's time; the runner's timers and the runtime's header are this machine's.
        invocations.run({ ...event.data, deadline: clock.toLocal(event.data.deadline) });
      } else if (event.event === 'cancel') {
        invocations.cancel(event.data.invocationId, event.data.reason);
      } else if (event.event === 'logs') {
        void (async () => {
          const lines = await supervisor.logs(event.data.assignmentId, event.data.lines);
          const path = `/agent/v1/runtimes/${encodeURIComponent(event.data.assignmentId)}/logs`;
          const result = await client.request('POST', path, { requestId: event.data.requestId, lines }, LogUploadAccepted);
          if (!result.success) log('log upload rejected', { code: result.error.code });
        })().catch((error: unknown) => log('log upload failed', { error: error instanceof Error ? error.message : String(error) }));
      } else if (event.event === 'revoked') {
        log('machine revoked', { reason: event.data.reason });
        void shutdown('revoked');
      }
    },
  });

  async function shutdown(reason: 'stopped' | 'revoked') {
    if (stopping) return;
    stopping = true;
    const revoked = reason === 'revoked';
    // A revoked machine is cut off at once, and no longer trusted with its desired state: its runtimes stop too.
    // A stopping one reports `draining` and lets its in-flight invocations finish (bounded), with the link and
    // the heartbeats still going; the invocations sent meanwhile are refused before any head and retried elsewhere.
    if (revoked) {
      closed = true;
      link.close();
      uplink.stop();
    }
    const supervised = supervisor.shutdown({ stopRuntimes: revoked || (opts.stopRuntimesOnExit ?? false), drain: !revoked });
    if (!revoked) await report();
    await supervised;
    closed = true;
    clearTimeout(heartbeatTimer);
    clearTimeout(retryTimer);
    clearTimeout(reportTimer);
    clearTimeout(refetchTimer);
    link.close();
    uplink.stop();
    await reporting;
    finish(reason);
  }

  // Agents started together (a power cut, a control-plane restart) spread their first reports.
  scheduleKeepAlive(firstReportDelayMs(intervalMs));
  return { done, stop: () => shutdown('stopped') };
}
