import { spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import type { WorkerAssignment } from '../../shared/contracts/desired.js';
import { templateRefusal, WORKER_PLATFORM_ENV, type AgentPolicy } from '../policy.js';
import type { RuntimeUser, RuntimeUsers } from '../runtime-user.js';
import { refusedByPolicy } from '../runtimes/adapter.js';
import { executableDigest } from '../runtimes/files.js';
import type { MachineHolds } from '../runtimes/holds.js';
import { workerEnv } from '../runtimes/launch.js';
import { processStartTicks, workerLogPath, workersDir, type WorkerRecord } from './records.js';

/** A worker prepared to start: whom it runs as and on which GPUs, both held from now on. */
export interface PreparedWorker {
  user: RuntimeUser;
  gpuIndices: number[];
}

/** A worker's key in the machine's holds, apart from runtimes' assignment ids. */
export const holderOf = (workerId: string) => `worker:${workerId}`;

/**
 * Everything but the spawn, as for a runtime: the local policy's verdict on its command (the same check as a
 * runtime template's, its platform variables allowed), its executable's pinned digest on disk, a uid of the range
 * with a fresh home, and its GPUs. Throws a `LaunchRefused` the worker fails with for good.
 */
export async function prepareWorker(
  assignment: WorkerAssignment,
  opts: { policy: AgentPolicy; users: RuntimeUsers | null; holds: MachineHolds },
): Promise<PreparedWorker> {
  const refusal = templateRefusal(opts.policy, assignment.command, WORKER_PLATFORM_ENV);
  if (refusal !== null) throw refusedByPolicy(refusal);
  if (!opts.users) throw refusedByPolicy('the agent runs as root and the policy names no runAs user to run workers as');
  const { executable, executableSha256 } = assignment.command;
  const onDisk = await executableDigest(executable);
  if (onDisk !== executableSha256) throw refusedByPolicy(`${executable} on disk has SHA-256 ${onDisk}, not the pinned ${executableSha256}`);
  const holder = holderOf(assignment.workerId);
  const user = await opts.holds.runAs(holder, opts.users);
  try {
    return { user, gpuIndices: await opts.holds.reserveGpus(holder, assignment.resources.gpus) };
  } catch (error) {
    opts.holds.release(holder);
    throw error;
  }
}

/**
 * Starts the worker's process beside the runtimes: its own process group (stopped as a whole, and left running
 * when the agent restarts), output appended to its log through a descriptor the agent opened, run from `/`.
 * Calls `onExit` when it ends, if it ends while this agent runs.
 */
export async function spawnWorker(
  assignment: WorkerAssignment,
  prepared: PreparedWorker,
  /** `jobEnv`: a job runner's variables (`WorkerSupervisorOptions.jobEnv`), beside the template's. */
  opts: { stateDir: string; jobEnv: Record<string, string> },
  onExit: (code: number | null, signal: NodeJS.Signals | null) => void,
): Promise<WorkerRecord> {
  const { stateDir } = opts;
  await mkdir(workersDir(stateDir), { recursive: true, mode: 0o700 });
  const log = openSync(workerLogPath(stateDir, assignment.workerId), 'a', 0o600);
  try {
    const { command } = assignment;
    const child = spawn(command.executable, command.args, {
      detached: true,
      stdio: ['ignore', log, log],
      cwd: '/',
      env: workerEnv({ ...command.env, ...opts.jobEnv }, { home: prepared.user.home, gpuIndices: prepared.gpuIndices }),
      ...(prepared.user.ids ?? {}),
    });
    await new Promise<void>((resolve, reject) => {
      child.once('spawn', resolve);
      child.once('error', reject);
    });
    child.once('exit', onExit);
    child.unref();
    const pid = child.pid!;
    return {
      workerId: assignment.workerId,
      attempt: assignment.attempt,
      pid,
      uid: prepared.user.ids?.uid ?? null,
      gpuIndices: prepared.gpuIndices,
      startedAt: new Date().toISOString(),
      // 0 when it already ended: such a record is never adopted.
      startTicks: (await processStartTicks(pid)) ?? 0,
    };
  } finally {
    closeSync(log);
  }
}
