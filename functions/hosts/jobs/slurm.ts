import { spawn } from 'node:child_process';
import { mkdir } from 'node:fs/promises';
import { constants } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { RunnerEnd } from '../../core/jobs/states.js';
import type { JobsSlurmConfig } from '../../kernel/config.js';
import { type ComputeBackend, type RunnerLaunch, type RunnerProbe, RUNNER_POLL_MS, waitByProbe } from './compute.js';

/** The runner's program in a checkout (docs/jobs.md, "The runner"). */
const RUNNER_BIN = fileURLToPath(new URL('../../../bin/lunanexa-runner.mjs', import.meta.url));

/** A Slurm command that has not answered by then is killed: its error says so rather than the job host hanging. */
const COMMAND_TIMEOUT_MS = 30_000;

/**
 * How long `wait` bears a Slurm that does not answer (slurmctld restarting, the network) before it gives up on the
 * runner: a job that ran on meanwhile is still there, so an outage must not read as a lost runner started again.
 */
const UNREACHABLE_MS = 300_000;

/** The states of a job still in Slurm's queue (`scontrol show job`'s JobState), as a runner's. */
const QUEUED = new Set(['PENDING', 'REQUEUED', 'REQUEUE_HOLD', 'REQUEUE_FED', 'RESV_DEL_HOLD', 'SPECIAL_EXIT']);
const RUNNING = new Set(['CONFIGURING', 'RUNNING', 'COMPLETING', 'SUSPENDED', 'STOPPED', 'SIGNALING', 'STAGE_OUT', 'RESIZING']);
/** The node the runner ran on failed: the runner was lost with its host, as a `local` runner with its instance. */
const NODE_LOST = new Set(['NODE_FAIL', 'BOOT_FAIL']);
const ENDED = new Set(['COMPLETED', 'FAILED', 'CANCELLED', 'TIMEOUT', 'PREEMPTED', 'OUT_OF_MEMORY', 'DEADLINE', 'REVOKED', ...NODE_LOST]);

export interface SlurmBackendOptions {
  /** Where sbatch, scontrol and scancel are; unset: found on the PATH. */
  binDir?: string;
  /**
   * The environment the Slurm commands are found and configured by (unset: this process's): only its PATH and
   * SLURM_CONF are passed on (the configuration's `conf` wins), never the control plane's own variables.
   */
  env?: Record<string, string | undefined>;
  /** How often `wait` looks at a runner, and how long it bears a Slurm that does not answer (tests shorten them). */
  pollMs?: number;
  unreachableMs?: number;
}

/** A Slurm job id as `sbatch --parsable` prints it; a handle of anything else never reaches a command's argv. */
const SLURM_ID = /^[0-9]+$/;
/** Job ids and attempts go into the job's name and its output's path. */
const JOB_ID = /^[A-Za-z0-9_-]{1,128}$/;

/**
 * The `slurm` backend (docs/jobs.md, "Slurm"): each attempt of a job's runner is a batch job of the site's Slurm,
 * submitted with `sbatch` from this host, and found again by its Slurm job id (the handle) from any instance: the
 * Slurm job outlives the instance that submitted it. The runner's variables travel as sbatch's own environment
 * (`--export=ALL` of an environment made of them alone): the token is never on an argv, in the batch script or in a log.
 */
export function slurmBackend(config: JobsSlurmConfig, options?: SlurmBackendOptions): ComputeBackend;
export function slurmBackend(config: JobsSlurmConfig | null, options?: SlurmBackendOptions): ComputeBackend | null;
export function slurmBackend(config: JobsSlurmConfig | null, options: SlurmBackendOptions = {}): ComputeBackend | null {
  if (!config) return null;
  const command = config.command ?? [process.execPath, RUNNER_BIN];
  const pollMs = options.pollMs ?? RUNNER_POLL_MS;
  const unreachableMs = options.unreachableMs ?? UNREACHABLE_MS;
  const env = options.env ?? process.env;
  const base: Record<string, string> = {};
  if (env.PATH !== undefined) base.PATH = env.PATH;
  const conf = config.conf ?? env.SLURM_CONF;
  if (conf !== undefined) base.SLURM_CONF = conf;
  // PATH and SLURM_CONF are this host's: a runner's variables never pick another Slurm or another sbatch.
  const slurm = (tool: string, args: string[], more: { env?: Record<string, string>; input?: string } = {}) =>
    runCommand(options.binDir ? join(options.binDir, tool) : tool, args, { env: { ...more.env, ...base }, input: more.input });

  const probe = async (handle: string): Promise<RunnerProbe> => {
    const id = slurmId(handle);
    // One command for every state: squeue forgets a job as it leaves the queue, scontrol keeps it MinJobAge longer
    // (300 s by default) with its exit code. Without accounting storage (slurmdbd) sacct knows nothing at all.
    const shown = await slurm('scontrol', ['show', 'job', '--oneliner', id]).catch((error: unknown) => {
      if (error instanceof CommandError && /Invalid job id specified/i.test(error.stderr)) return null;
      throw error;
    });
    if (shown === null) return { state: 'gone' };
    return probeOf(id, shown);
  };

  return {
    name: 'slurm',
    durable: true,
    tokenAtStart: true,
    capacity: config.runners,

    async submit(launch: RunnerLaunch): Promise<string> {
      if (!JOB_ID.test(launch.jobId) || !Number.isInteger(launch.attempt) || launch.attempt < 0) {
        throw new Error(`cannot name a Slurm job for job ${JSON.stringify(launch.jobId)}, attempt ${launch.attempt}`);
      }
      const name = `lunanexa-${launch.jobId}-${launch.attempt}`;
      // It must exist before the job starts on a node: Slurm fails a job whose output it cannot open.
      await mkdir(config.logDir, { recursive: true, mode: 0o700 });
      const args = [
        '--parsable',
        `--job-name=${name}`,
        `--output=${join(config.logDir, `${name}-%j.log`)}`,
        `--chdir=${config.logDir}`,
        // A node failure ends the attempt, and the control plane starts the next from the checkpoint with a new
        // token, rather than Slurm running this attempt again behind its back.
        '--no-requeue',
        // The job's environment is sbatch's own, which is only the runner's variables (and PATH, SLURM_CONF): their
        // values are on no argv. Naming them instead (`--export=NAME,...`) would also load the user's login
        // environment on the node (Slurm's implied --get-user-env: their login shell, seconds per job).
        '--export=ALL',
        '--ntasks=1',
        `--cpus-per-task=${config.cpus}`,
        `--mem=${config.memoryMiB}M`,
        ...(config.partition ? [`--partition=${config.partition}`] : []),
        ...(config.account ? [`--account=${config.account}`] : []),
        ...config.extraArgs,
      ];
      const output = await slurm('sbatch', args, { env: launch.env, input: batchScript(launch, command) });
      // `<id>` or `<id>;<cluster>`: one cluster is supported, the one SLURM_CONF names.
      const id = output.trim().split(';')[0] ?? '';
      if (!SLURM_ID.test(id)) throw new Error(`sbatch answered ${JSON.stringify(output.trim().slice(0, 200))}, not a job id`);
      return id;
    },

    async wait(handle: string, signal: AbortSignal): Promise<RunnerEnd> {
      let failingSince: number | null = null;
      const patient = async (seen: string): Promise<RunnerProbe> => {
        try {
          const probed = await probe(seen);
          failingSince = null;
          return probed;
        } catch (error) {
          failingSince ??= Date.now();
          if (Date.now() - failingSince >= unreachableMs) throw error;
          // Unknown for now, not ended: it is looked at again at the next poll.
          return { state: 'running' };
        }
      };
      return await waitByProbe(patient, handle, signal, pollMs);
    },

    async cancel(handle: string): Promise<void> {
      // Slurm sends the runner SIGTERM, then SIGKILL after KillWait; a job that already ended is cancelled quietly.
      await slurm('scancel', [slurmId(handle)]);
    },

    probe,
  };
}

/**
 * The batch script: it only starts the runner. It holds no secret (Slurm keeps it, and `scontrol write batch_script`
 * shows it to the job's user): the runner's variables come through the job's environment.
 */
function batchScript(launch: RunnerLaunch, command: string[]): string {
  return [
    '#!/bin/sh',
    `# LunaNexa job ${launch.jobId}, attempt ${launch.attempt}: its runner (docs/jobs.md, "Slurm").`,
    `exec ${command.map(shellQuote).join(' ')}`,
    '',
  ].join('\n');
}

function shellQuote(word: string): string {
  return `'${word.replaceAll("'", `'\\''`)}'`;
}

function slurmId(handle: string): string {
  if (!SLURM_ID.test(handle)) throw new Error(`${JSON.stringify(handle.slice(0, 100))} is not a Slurm job id`);
  return handle;
}

/** A runner as `scontrol show job --oneliner` describes its job. */
function probeOf(id: string, shown: string): RunnerProbe {
  // `(?:^|\s)`: DerivedExitCode must not be read as ExitCode.
  const state = /(?:^|\s)JobState=(\S+)/.exec(shown)?.[1];
  if (state === undefined) throw new Error(`scontrol showed Slurm job ${id} without a JobState: ${shown.slice(0, 200)}`);
  if (QUEUED.has(state)) return { state: 'queued' };
  // A state this backend does not know is one Slurm still holds the job in: looked at again until it ends.
  if (RUNNING.has(state) || !ENDED.has(state)) return { state: 'running' };
  if (NODE_LOST.has(state)) return { state: 'ended', end: { kind: 'lost' } };
  const exit = /(?:^|\s)ExitCode=(\d+):(\d+)/.exec(shown);
  const code = exit ? Number(exit[1]) : null;
  const signalNumber = exit ? Number(exit[2]) : 0;
  const signal = signalNumber === 0 ? null : (signalName(signalNumber) ?? `signal ${signalNumber}`);
  // 0:0 for a job that did not complete (cancelled before it started, a launch failure) is no exit code at all.
  return { state: 'ended', end: { kind: 'exited', code: signal !== null || (code === 0 && state !== 'COMPLETED') ? null : code, signal } };
}

function signalName(number: number): string | null {
  for (const [name, value] of Object.entries(constants.signals)) if (value === number) return name;
  return null;
}

/** A Slurm command that failed: its stderr says why (Slurm's commands write nothing secret there). */
class CommandError extends Error {
  constructor(
    message: string,
    readonly stderr: string,
  ) {
    super(message);
  }
}

/**
 * Runs a Slurm command without a shell, with only `env` as its environment, `input` on its stdin, and a timeout;
 * resolves with its stdout. Its argv never holds a secret, and so may be in the error.
 */
function runCommand(file: string, args: string[], options: { env: Record<string, string>; input?: string }): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { env: options.env, stdio: ['pipe', 'pipe', 'pipe'], timeout: COMMAND_TIMEOUT_MS });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout = `${stdout}${chunk}`.slice(-65_536)));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr = `${stderr}${chunk}`.slice(-4_096)));
    // A command that exits before reading its stdin closes it: its exit says why, not EPIPE.
    child.stdin.on('error', () => {});
    child.stdin.end(options.input ?? '');
    const what = `${file} ${args.join(' ')}`;
    child.once('error', (error) => reject(new CommandError(`${what}: ${error.message}`, stderr)));
    child.once('close', (code, signal) => {
      if (code === 0) resolve(stdout);
      else {
        const how = signal ? `was killed by ${signal}${signal === 'SIGTERM' ? ` (over ${COMMAND_TIMEOUT_MS / 1000} s?)` : ''}` : `exited with code ${code}`;
        reject(new CommandError(`${what} ${how}: ${stderr.trim() || '(nothing on stderr)'}`, stderr));
      }
    });
  });
}
