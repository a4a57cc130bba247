import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { access, mkdir, readFile, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createEnrollmentToken } from '../../services/enrollment.js';
import { enrollAgent } from '../../../agent/enroll.js';
import { uidRangeProblem, type UidRange } from '../../../agent/runtime-user.js';
import { applyDeployment, type DeploymentInput } from '../../services/deployments.js';
import { getRuntimeTemplate, putRuntimeTemplate } from '../../services/runtime-templates.js';
import { ApiError } from '../../kernel/errors.js';
import type { RunningControlPlane } from '../node.js';
import { RUNNER_BIN } from '../jobs/local.js';
import { agentProgram } from './agent-program.js';
import type { RuntimeTemplateSpec } from '../../../shared/contracts/runtime-template.js';

/**
 * The simulator's job for runs (docs/runs.md): a script that prints its rank, sleeps `--sleep-ms` and exits with
 * `--exit-code`. Run by its shebang, so its pinned digest is the script's own.
 */
export const SIM_JOB_EXECUTABLE = fileURLToPath(new URL('../../../sim/sim-job.mjs', import.meta.url));

/** The simulator's client as a command job (docs/jobs.md, "Commands"): chat completions to the endpoint it is given. */
const SIM_CLIENT_EXECUTABLE = fileURLToPath(new URL('../../../sim/sim-client-job.mjs', import.meta.url));

/** A job template simulated nodes allow, pinned by its executable's digest as on disk now. */
interface PinnedTemplate {
  template: string;
  executable: string;
  executableSha256: string;
}

const pinned = async (template: string, executable: string): Promise<PinnedTemplate> => ({
  template,
  executable,
  executableSha256: createHash('sha256')
    .update(await readFile(executable))
    .digest('hex'),
});

/**
 * The job templates simulated nodes allow: the sim job for runs, with its two knobs as params (`sleep_ms`,
 * `exit_code`), the job runner of the `agent` backend (docs/jobs.md), which takes no argument: what it does comes
 * from its job, over HTTP, and the sim client, a command job that takes a count. None can be made to run other code
 * by what the control plane sends.
 */
const JOB_TEMPLATES: Array<{ name: string; executable: string } & Pick<RuntimeTemplateSpec, 'description' | 'args' | 'params'>> = [
  {
    name: 'sim-job',
    executable: SIM_JOB_EXECUTABLE,
    description: 'the simulator job: prints its rank variables, sleeps sleep_ms and exits with exit_code',
    args: ['--sleep-ms', '{sleep_ms}', '--exit-code', '{exit_code}'],
    params: {
      sleep_ms: { type: 'integer' as const, min: 0, max: 86_400_000, default: 1_000 },
      exit_code: { type: 'integer' as const, min: 0, max: 255, default: 0 },
    },
  },
  { name: 'lunanexa-runner', executable: RUNNER_BIN, description: "a job's runner (the agent backend of jobs)", args: [], params: {} },
  {
    name: 'sim-client',
    executable: SIM_CLIENT_EXECUTABLE,
    description: 'the simulator client: a command job that sends `requests` chat completions to its ENDPOINT and MODEL',
    args: ['--requests', '{requests}'],
    params: { requests: { type: 'integer' as const, min: 1, max: 10_000, default: 10 } },
  },
];

/** The templates simulated nodes allow for run workers and job runners, pinned as on disk now. */
export async function simJobTemplates(): Promise<PinnedTemplate[]> {
  return await Promise.all(JOB_TEMPLATES.map((t) => pinned(t.name, t.executable)));
}

/**
 * Registers the job templates (`JOB_TEMPLATES`) in `plane`'s workspace unless they are there: `npm start`'s fleet
 * runs runs and agent-backend jobs out of the box. One already there keeps what an admin made of it, but is pinned
 * again to its executable as it is on disk now (`writeSimPolicy` pins the nodes to it at each start: a template
 * pinned to an older digest would be refused by every node).
 */
export async function ensureJobTemplates(plane: Pick<RunningControlPlane, 'systemCtx' | 'workspaceId'>): Promise<void> {
  const ctx = plane.systemCtx;
  for (const { name, executable, description, args, params } of JOB_TEMPLATES) {
    const { executableSha256 } = await pinned(name, executable);
    const existing = await getRuntimeTemplate({ ctx, input: { workspaceId: plane.workspaceId, name } }).catch((error: unknown) => {
      if (error instanceof ApiError && error.code === 'not_found') return null;
      throw error;
    });
    const spec = existing
      ? (({ name: _n, createdAt: _c, updatedAt: _u, ...kept }) => ({ ...kept, executable, executableSha256 }))(existing)
      : { description, executable, executableSha256, args, params, env: [], healthPath: '/health', metricsPath: null };
    await putRuntimeTemplate({ ctx, input: { workspaceId: plane.workspaceId, name, spec } });
  }
}

/**
 * The simulator's stand-in for nvidia-smi: one GB10 with unified memory, as a DGX Spark has. A simulated node lists
 * its GPUs with it (LUNANEXA_AGENT_NVIDIA_SMI), at enrollment and when it reserves them, so that runs reserve a GPU,
 * and samples it for telemetry, its utilisation following the node's runtimes.
 */
const SIM_NVIDIA_SMI = fileURLToPath(new URL('../../../sim/nvidia-smi.mjs', import.meta.url));

/** Starts `lunanexa-agent <args>` as a separate process, its stderr appended to `logFile`. */
export function spawnAgent(args: string[], opts: { logFile: string; env?: NodeJS.ProcessEnv }): ChildProcess {
  const child = spawn(process.execPath, [...agentProgram(), ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...opts.env },
  });
  const log = createWriteStream(opts.logFile, { flags: 'a', mode: 0o600 });
  child.stdout!.pipe(log, { end: false });
  child.stderr!.pipe(log, { end: false });
  child.once('exit', () => log.end());
  return child;
}

export async function waitForExit(child: ChildProcess, timeoutMs = 15_000): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
  return await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`process ${child.pid} did not exit within ${timeoutMs} ms`)), timeoutMs);
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolve(code);
    });
  });
}

/**
 * The demo deployment `npm start` serves: model `sim-chat` on every simulated node. The deployment reserves
 * the memory its runtime reports; `overrides` replace whole fields of the input.
 */
export async function seedDemoDeployment(
  plane: Pick<RunningControlPlane, 'systemCtx' | 'workspaceId'>,
  replicas: number,
  runtime: { loadMs?: number; memoryMiB?: number; tokensPerSecond?: number } = {},
  overrides: Partial<DeploymentInput> = {},
) {
  const memoryMiB = runtime.memoryMiB ?? 1024;
  return await applyDeployment({
    ctx: plane.systemCtx,
    input: {
      workspaceId: plane.workspaceId,
      name: 'sim-chat',
      model: 'sim-chat',
      runtime: {
        kind: 'simulated',
        model: 'sim-chat',
        ttftMs: 20,
        tokensPerSecond: runtime.tokensPerSecond ?? 200,
        loadMs: runtime.loadMs ?? 300,
        memoryMiB,
        failureRate: 0,
      },
      artifact: null,
      restartPolicy: { mode: 'on-failure', maxRestarts: 5, backoffMs: 500 },
      replicas,
      selector: { sim: 'true' },
      gpus: 0,
      memoryMiB,
      ...overrides,
    },
  });
}

export interface SimNode {
  name: string;
  stateDir: string;
  logFile: string;
  process: ChildProcess;
}

/**
 * Simulated nodes' runtime uids: blocks of 64 in 2013265920-2147483647, the upper half of the ids systemd leaves
 * unused (1879048192 and up; docs/security.md's example range is the lower half), far above any account and any
 * container range it hands out.
 */
const SIM_UIDS_FIRST = 2_013_265_920;
const SIM_UIDS_PER_NODE = 64;
const SIM_UID_BLOCKS = (2 ** 31 - SIM_UIDS_FIRST) / SIM_UIDS_PER_NODE;

/**
 * The uids of a simulated node's runtimes and their group (the block's first id): a block picked by the node's state
 * dir, so that a node started again gets the same one (its runtimes are re-adopted) and two nodes hardly ever share
 * one. Refused unless no account owns a uid of it, as the agent itself checks.
 */
async function simRuntimeUids(stateDir: string): Promise<{ uids: UidRange; group: number }> {
  const block = createHash('sha256').update(resolve(stateDir)).digest().readUInt32BE(0) % SIM_UID_BLOCKS;
  const uids = { first: SIM_UIDS_FIRST + block * SIM_UIDS_PER_NODE, count: SIM_UIDS_PER_NODE };
  const problem = await uidRangeProblem(uids);
  if (problem !== null) throw new Error(`the runtime uids ${uids.first}-${uids.first + uids.count - 1} of ${stateDir} are not free: ${problem}`);
  return { uids, group: uids.first };
}

/**
 * The local policy of a simulated node: it runs the built-in simulator and, for run workers, the sim job (its
 * digest pinned; its flags only choose how long it sleeps and its exit code) and nothing else, when the agent runs as root
 * (a root agent without a run-as user refuses everything) each runtime as a uid of the node's own, with its model
 * cache beside its state dir (`<name>.cache`). 0600: the agent refuses a policy that others could rewrite.
 */
export async function writeSimPolicy(stateDir: string): Promise<string> {
  const path = join(stateDir, 'policy.json');
  const root = process.getuid?.() === 0;
  const templates = Object.fromEntries(
    (await simJobTemplates()).map((job) => [job.template, { executable: job.executable, executableSha256: job.executableSha256 }]),
  );
  const policy = {
    simulated: true,
    templates,
    ...(root ? { runAs: await simRuntimeUids(stateDir) } : {}),
    cache: { dir: `${stateDir}.cache`, maxBytes: 4 * 1024 ** 3 },
  };
  await writeFile(path, JSON.stringify(policy), { mode: 0o600 });
  return path;
}

/**
 * Enrolls (first time only, through the real enrollment path) and runs one simulated node: a separate agent
 * process with its own identity and state dir, declaring one simulated GB10 (`SIM_NVIDIA_SMI`).
 */
export async function startSimNode(
  plane: RunningControlPlane,
  name: string,
  rootDir: string,
  /**
   * `url`: where the agent dials the control plane, when not at `plane.url` (a balancer or proxy in front).
   * `telemetryMs`: how often the node samples its GPU and engines (LUNANEXA_AGENT_TELEMETRY_MS); none unless given,
   * because each sample starts the simulated nvidia-smi, a Node process, and most fleets of a test need none.
   */
  opts: { env?: NodeJS.ProcessEnv; url?: string; telemetryMs?: number } = {},
): Promise<SimNode> {
  const stateDir = join(rootDir, name);
  await mkdir(stateDir, { recursive: true, mode: 0o700 });
  const logFile = join(stateDir, 'agent.log');
  const enrolled = await access(join(stateDir, 'identity.json')).then(
    () => true,
    () => false,
  );
  if (!enrolled) {
    const token = await createEnrollmentToken({
      ctx: plane.systemCtx,
      input: { workspaceId: plane.workspaceId, name, labels: { sim: 'true' }, ttlSeconds: 300 },
    });
    if (opts.env === undefined && opts.url === undefined) {
      // The agent's own enrollment code over HTTP, run here: the same path as `lunanexa-agent enroll` without one
      // more process per node (on two cores a Node process start is seconds). An agent that needs its own
      // environment (a proxy, a fake clock) or another address enrolls as its own process instead.
      await enrollAgent({ url: plane.url, token: token.token, name, stateDir, log: () => {}, nvidiaSmi: SIM_NVIDIA_SMI });
    } else {
      const enroll = spawnAgent(['enroll', '--url', opts.url ?? plane.url, '--token', '-', '--name', name, '--state-dir', stateDir], {
        logFile,
        env: { ...opts.env, LUNANEXA_AGENT_NVIDIA_SMI: SIM_NVIDIA_SMI, LUNANEXA_ENROLLMENT_TOKEN: token.token },
      });
      const code = await waitForExit(enroll, 60_000);
      if (code !== 0) throw new Error(`enrolling ${name} failed (exit ${code}); see ${logFile}`);
    }
  }
  return {
    name,
    stateDir,
    logFile,
    process: spawnAgent(['run', '--state-dir', stateDir, '--policy', await writeSimPolicy(stateDir), '--stop-runtimes-on-exit'], {
      logFile,
      // The state dir in the environment too: the simulated nvidia-smi, which inherits it, finds the node's runtimes there.
      env: {
        LUNANEXA_AGENT_TELEMETRY_MS: String(opts.telemetryMs ?? 0),
        ...opts.env,
        LUNANEXA_AGENT_NVIDIA_SMI: SIM_NVIDIA_SMI,
        LUNANEXA_AGENT_STATE_DIR: stateDir,
      },
    }),
  };
}

/** Stops agents with SIGTERM (they stop their runtimes), then waits for them. */
export async function stopSimNodes(nodes: SimNode[]): Promise<void> {
  for (const node of nodes) node.process.kill('SIGTERM');
  // Not swallowed: an agent that does not exit in time (waitForExit rejects) is killed.
  await Promise.all(nodes.map((node) => waitForExit(node.process).catch(() => node.process.kill('SIGKILL'))));
}
