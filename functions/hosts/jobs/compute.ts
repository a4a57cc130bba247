import type { JobBackend, JobSpec } from '../../../shared/batch/job.js';
import type { RunnerEnd } from '../../core/jobs/states.js';

/**
 * What a backend is given to start one attempt of a job's runner (docs/jobs.md, "Backends"): the job, the attempt,
 * and the environment the runner reads. `env` holds LUNANEXA_URL, LUNANEXA_JOB_ID and, for a backend that takes its
 * token at the start (`tokenAtStart`), LUNANEXA_JOB_TOKEN, with ENDPOINT, MODEL, OPENAI_BASE_URL and OPENAI_API_KEY
 * for a script: a backend passes them to the process only, never on its argv and never to a log.
 */
export interface RunnerLaunch {
  jobId: string;
  attempt: number;
  env: Record<string, string>;
  /** The job's workspace: a backend that records its runners elsewhere (a run) records them there. */
  workspaceId: string;
  /** What the job does: a command job's process is its template's, not the runner. */
  spec: JobSpec;
}

/** How a backend sees a runner it started now. `gone`: it knows of no such runner (ended long ago, or never started). */
export type RunnerProbe = { state: 'queued' | 'running' } | { state: 'ended'; end: RunnerEnd } | { state: 'gone' };

/**
 * Where job runners run (docs/jobs.md, "Backends"): the same four verbs for the control plane's own host (`local`),
 * Slurm (`slurm`) and the fleet's nodes (`agent`). `submit` starts a runner and names it (the handle kept on the job);
 * `wait` resolves when it ended, and how; `cancel` stops it; `probe` says where it stands, so that an instance taking
 * over a job whose holder died finds the runner again (`durable` backends only: a `local` runner dies with its host).
 */
export interface ComputeBackend {
  readonly name: JobBackend;
  /** Its runners outlive the instance that started them: another instance adopts them by their handle. */
  readonly durable: boolean;
  /** The runner is given its token in `env` at the start; otherwise it obtains it itself (the agent asks for it). */
  readonly tokenAtStart: boolean;
  /** Runners of this backend this instance holds at once, at most. */
  readonly capacity: number;
  submit(launch: RunnerLaunch): Promise<string>;
  wait(handle: string, signal: AbortSignal): Promise<RunnerEnd>;
  cancel(handle: string): Promise<void>;
  probe(handle: string): Promise<RunnerProbe>;
}

/** How often a backend without an event for a runner's end looks at it (Slurm's queue, a run's state). */
export const RUNNER_POLL_MS = 1_000;

/**
 * `wait` for a backend that only knows how to `probe`: it looks every `pollMs` until the runner ended; a runner the
 * backend no longer knows of was lost. Aborted, it rejects with the signal's reason.
 */
export async function waitByProbe(
  probe: (handle: string) => Promise<RunnerProbe>,
  handle: string,
  signal: AbortSignal,
  pollMs = RUNNER_POLL_MS,
): Promise<RunnerEnd> {
  for (;;) {
    signal.throwIfAborted();
    const seen = await probe(handle);
    if (seen.state === 'ended') return seen.end;
    if (seen.state === 'gone') return { kind: 'lost' };
    await new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, pollMs);
      signal.addEventListener('abort', done, { once: true });
    });
  }
}
