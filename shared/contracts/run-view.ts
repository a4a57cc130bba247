import { z } from 'zod';
import { RunName, RunSpec } from './run.js';

/** The states of a run and of its workers (functions/core/runs/states.ts). */
const RunStateName = z.enum(['pending', 'preparing', 'pulling', 'ready-to-start', 'starting', 'running', 'completed', 'failed', 'stale', 'down']);

/** A run as `POST /api/v1/runs` takes it: its name (unique among its workspace's live runs) and its spec. */
export const RunSubmission = z.object({ name: RunName, spec: RunSpec });
export type RunSubmission = z.infer<typeof RunSubmission>;

/** A run in a list: where it stands and, while it waits, why and its place in its workspace's queue. */
export const RunView = z.object({
  id: z.string(),
  name: z.string(),
  state: RunStateName,
  priority: z.number().int(),
  /** Why it waits, or why it ended; null while it runs. */
  reason: z.string().nullable(),
  /** 1: the next of its workspace's queue; null unless it waits. */
  position: z.number().int().nullable(),
  restarts: z.number().int(),
  workerCount: z.number().int(),
  /** Its workers that completed (exited 0). */
  workersDone: z.number().int(),
  submittedAt: z.string(),
  startedAt: z.string().nullable(),
  finishedAt: z.string().nullable(),
});
export type RunView = z.infer<typeof RunView>;

export const RunWorkerView = z.object({
  id: z.string(),
  name: z.string(),
  rank: z.number().int(),
  group: z.string().nullable(),
  state: RunStateName,
  machineId: z.string().nullable(),
  /** Its machine's name: the machine may be another workspace's, shared with the fleet's run queue. */
  machineName: z.string().nullable(),
  attempt: z.number().int(),
  restarts: z.number().int(),
  phase: z.enum(['prepare', 'start']),
  exitCode: z.number().int().nullable(),
  message: z.string().nullable(),
  resources: z.object({ gpus: z.number().int(), cores: z.number().int(), memoryMiB: z.number().int() }),
});
export type RunWorkerView = z.infer<typeof RunWorkerView>;

const RunEventView = z.object({
  workerId: z.string().nullable(),
  from: z.string(),
  to: z.string(),
  reason: z.string(),
  origin: z.string(),
  at: z.string(),
});

/** One run with its spec, its workers and its events, oldest first. */
export const RunDetail = RunView.extend({ spec: RunSpec, workers: z.array(RunWorkerView), events: z.array(RunEventView) });
export type RunDetail = z.infer<typeof RunDetail>;

/** A worker's log tail as `GET /api/v1/runs/{id}/workers/{rank}/logs` answers it: which worker, where, its lines. */
export const WorkerLogs = z.object({ workerId: z.string(), machineId: z.string(), lines: z.array(z.string()) });
export type WorkerLogs = z.infer<typeof WorkerLogs>;

/**
 * A workspace's standing in the fleet's run queue (docs/runs.md, "Fair share"), as `GET /api/v1/run-queue` answers
 * it: what its run workers held over the window, divided by its weight, and where that puts it among the workspaces
 * whose runs wait.
 */
export const RunQueueStanding = z.object({
  windowMs: z.number().int(),
  weight: z.number(),
  priorityCeiling: z.number().int(),
  /** GPU-seconds its run workers held within the window, those still held up to now. */
  gpuSeconds: z.number(),
  /** `gpuSeconds / weight`: among runs of equal priority, the workspace of the lower share goes first. */
  share: z.number(),
  /** Its runs waiting in the queue. */
  waiting: z.number().int(),
  /** GPUs its run workers hold now. */
  gpusHeld: z.number().int(),
  /** How many workspaces have runs waiting, its own included when it has. */
  competing: z.number().int(),
  /** Its place among those by share (1: its runs go first at equal priority); null when none of its runs waits. */
  rank: z.number().int().nullable(),
});
export type RunQueueStanding = z.infer<typeof RunQueueStanding>;
