/**
 * The states of a job (docs/jobs.md, "States"): `pending` until a backend starts its runner; `running` while it works
 * through its rows; `finalizing` while its output is assembled, towards its `outcome`; `completed`, `failed`,
 * `cancelled` and `expired`: final. `cancelling`: asked to stop, its runner not yet stopped. A job that stops early
 * keeps what it finished: its output holds every row done before, however it ended.
 */
export const JOB_STATES = ['pending', 'running', 'finalizing', 'completed', 'failed', 'cancelling', 'cancelled', 'expired'] as const;
export type JobState = (typeof JOB_STATES)[number];

const FINAL: ReadonlySet<JobState> = new Set(['completed', 'failed', 'cancelled', 'expired']);

/** Where a job ends: the final state its finalizing reaches. */
export type JobOutcome = 'completed' | 'failed' | 'cancelled' | 'expired';

// Every end goes through `finalizing`, which writes what was finished; a runner that exits before its rows are done
// starts again (`running` -> `pending`), its checkpoint kept.
const MOVES: Record<JobState, readonly JobState[]> = {
  pending: ['running', 'finalizing'],
  running: ['pending', 'finalizing', 'cancelling'],
  finalizing: ['completed', 'failed', 'cancelled', 'expired'],
  cancelling: ['finalizing'],
  completed: [],
  failed: [],
  cancelled: [],
  expired: [],
};

export const isFinal = (state: JobState) => FINAL.has(state);

/** Whether `from -> to` is a move a job makes; a final state moves nowhere. */
export function jobMove(from: JobState, to: JobState): { ok: true } | { refused: string } {
  if (MOVES[from].includes(to)) return { ok: true };
  return { refused: isFinal(from) ? `the job is ${from}` : `a job does not move from ${from} to ${to}` };
}

/** The OpenAI Batch API's status of a batch job. */
export type BatchStatus = 'validating' | 'failed' | 'in_progress' | 'finalizing' | 'completed' | 'expired' | 'cancelling' | 'cancelled';

/**
 * The Batch API's status for a job's state: a job not yet started is `validating` (its runner checks each line as it
 * reads it: a malformed line fails that row, not the batch), a running one `in_progress`.
 */
export function batchStatus(state: JobState): BatchStatus {
  if (state === 'pending') return 'validating';
  if (state === 'running') return 'in_progress';
  return state;
}

/** What ends a runner's attempt, as its backend saw it. */
export type RunnerEnd = { kind: 'done' } | { kind: 'exited'; code: number | null; signal: string | null } | { kind: 'lost' };

/**
 * What follows the end of a runner's attempt `attempt` (0-based) of a job allowed `maxAttempts`: a runner that said
 * it was done finalizes; one that exited otherwise, or was lost with its host, starts again from the checkpoint while
 * attempts are left, else the job fails (finalized with what it finished). A cancelling job finalizes whatever ended it.
 */
export function afterRunner(input: {
  state: JobState;
  attempt: number;
  maxAttempts: number;
  end: RunnerEnd;
}): { next: 'finalize' } | { next: 'restart' } | { next: 'fail'; reason: string } {
  const { state, attempt, maxAttempts, end } = input;
  if (end.kind === 'done' || state === 'cancelling') return { next: 'finalize' };
  const how =
    end.kind === 'lost'
      ? 'its runner was lost with its host'
      : end.signal
        ? `its runner was killed by ${end.signal}`
        : `its runner exited with code ${end.code}`;
  if (attempt + 1 < maxAttempts) return { next: 'restart' };
  return { next: 'fail', reason: `${how}, attempt ${attempt + 1} of ${maxAttempts}` };
}
