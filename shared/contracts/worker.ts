import { z } from 'zod';

/**
 * The wire contract of a run's workers between the control plane and the agent (docs/runs.md): what a machine is
 * told to run (a `WorkerAssignment` in its signed desired state, beside its replicas: shared/contracts/desired.ts) and what it says of each
 * (a `WorkerReport` in its heartbeats). The agent never restarts a worker by itself: a restart decided by the run's
 * failure policy arrives as a new `attempt`.
 */

/** The states an agent reports of a worker (functions/core/runs/states.ts holds the whole machine). */
export const WorkerReportedState = z.enum(['preparing', 'pulling', 'ready-to-start', 'starting', 'running', 'completed', 'failed']);
export type WorkerReportedState = z.infer<typeof WorkerReportedState>;

/** What the agent says of one worker it was assigned or still runs. */
export const WorkerReport = z.object({
  workerId: z.string().min(1).max(64),
  attempt: z.number().int().nonnegative().max(1_000_000),
  state: WorkerReportedState,
  /** The process's exit status once `completed` (0) or `failed` by its exit; null otherwise. */
  exitCode: z.number().int().min(-255).max(255).nullable(),
  /** Short operator-facing reason for `failed` (e.g. "process not found" after the agent restarted); never a payload. */
  message: z.string().max(500).nullable(),
});
export type WorkerReport = z.infer<typeof WorkerReport>;

/**
 * The message of a worker its agent had a record of but no process for after a restart: the control plane
 * takes it as the process gone (released, and the run's failure policy applies).
 */
export const PROCESS_NOT_FOUND = 'process not found';

/** How many workers one machine runs at most (the desired state and the heartbeat are bounded by it). */
export const MAX_MACHINE_WORKERS = 256;

/**
 * What the agent asks for when it starts a worker that is a job's runner (`WorkerAssignment.job`): the runner's
 * token for that worker's attempt (`POST /agent/v1/jobs/{id}/runner-token`).
 */
export const RunnerTokenRequest = z.object({
  workerId: z.string().min(1).max(64),
  attempt: z.number().int().nonnegative().max(1_000_000),
});
export type RunnerTokenRequest = z.infer<typeof RunnerTokenRequest>;

/** The runner's token (role `inference`: `/v1` and its own job's runner routes), and its job's model (MODEL). */
export const RunnerTokenGrant = z.object({
  token: z.string().min(1).max(512),
  model: z.string().max(256),
});
export type RunnerTokenGrant = z.infer<typeof RunnerTokenGrant>;
