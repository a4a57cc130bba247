import { z } from 'zod';
import { EngineSample, GpuSample, MAX_GPU_SAMPLES } from './telemetry.js';
import { MAX_MACHINE_WORKERS, WorkerReport } from './worker.js';

/**
 * Counts and generations are stored as PostgreSQL `integer` (int4): one past 2^31 - 1 is refused here (400), not
 * by the store. Durations fit a safe integer.
 */
const Int4 = z
  .number()
  .int()
  .nonnegative()
  .max(2 ** 31 - 1);
const Ms = z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER);
/** Names and ids carry no control characters (a NUL byte is refused by the store's text and jsonb). */
const Text = (max: number) =>
  z
    .string()
    .max(max)
    .regex(/^[^\u0000-\u001f\u007f]*$/, 'control characters are not allowed');

export const RuntimeState = z.enum(['preparing', 'pulling', 'starting', 'ready', 'draining', 'failed', 'stopped']);
export type RuntimeState = z.infer<typeof RuntimeState>;

/** How long a runtime has been preparing, pulling or starting, against its start timeout. */
export const StartupProgress = z.object({
  elapsedMs: Ms,
  timeoutMs: Ms.positive(),
  /** While pulling: bytes of the version's files in the cache (verified or downloading) against their total. */
  bytesDone: Ms.optional(),
  bytesTotal: Ms.optional(),
});
export type StartupProgress = z.infer<typeof StartupProgress>;

export const RuntimeReport = z.object({
  assignmentId: Text(64),
  deploymentId: Text(64),
  state: RuntimeState,
  /** The desired-state generation this runtime runs under. */
  gen: Int4,
  /** Invocations whose runtime answer is streaming (the runtime's response head arrived). */
  activeInvocations: Int4,
  /** Invocations the agent accepted and handed to the runtime that have no response head yet. */
  queueDepth: Int4,
  /** Ready and served an invocation within the last 5 minutes (caches hot): routing's tie-break prefers it. */
  warm: z.boolean(),
  /** While preparing, pulling or starting: how long it has been at it, against its start timeout. */
  progress: StartupProgress.nullable(),
  /**
   * Restarts so far under the assignment's restart policy. `failed` with no restart left by that policy
   * (shared/restart-policy.ts) is failed for good: the agent will not restart it, and the controller replaces it
   * on another machine. `failed` with restarts left waits for its next restart.
   */
  restarts: Int4,
  /** Short operator-facing reason for `failed`; never a payload. */
  message: z.string().max(500).nullable(),
  /** Its engine's own metrics, when its template declares where to read them and the last read succeeded. */
  engine: EngineSample.nullable().default(null),
});
export type RuntimeReport = z.infer<typeof RuntimeReport>;

/**
 * The machine as its agent sees itself: `draining` while the agent shuts down (its runtimes take no new work),
 * `degraded` while a runtime is failed, else `ready`.
 */
export const MachineStatus = z.enum(['ready', 'degraded', 'draining']);
export type MachineStatus = z.infer<typeof MachineStatus>;

/** Body of POST /agent/v1/heartbeat, sent as RFC 8785 canonical JSON. */
export const Heartbeat = z.object({
  machineId: Text(64),
  bootId: Text(64).min(8),
  seq: Int4,
  status: MachineStatus,
  gen: Int4,
  runtimes: z.array(RuntimeReport).max(64),
  /** The run workers it was assigned or still runs (shared/contracts/worker.ts). */
  workers: z.array(WorkerReport).max(MAX_MACHINE_WORKERS).default([]),
  /**
   * The address other machines of its site reach it at (rank 0's is a run's MASTER_ADDR): LUNANEXA_AGENT_ADDRESS,
   * else the first non-internal IPv4 of the machine; null when it has none.
   */
  address: z.string().max(255).nullable().default(null),
  /** Models loaded in a ready runtime on this machine. */
  warmModels: z.array(Text(200)).max(64),
  /** Model versions (`mv_...`) whose files sit verified in the agent's cache: the scheduler prefers these machines. */
  cachedVersions: z.array(Text(64)).max(256).default([]),
  /** Its GPUs as sampled lately (an agent without GPUs, or an older one, sends none). */
  gpus: z.array(GpuSample).max(MAX_GPU_SAMPLES).default([]),
  /**
   * Bounded numeric metrics; names are fixed by the agent, values are gauges. The control plane re-exposes only
   * the names the agent sends (functions/kernel/telemetry/node-metrics.ts).
   */
  metrics: z.record(Text(64), z.number()).refine((m) => Object.keys(m).length <= 64, 'at most 64 metrics'),
});
export type Heartbeat = z.infer<typeof Heartbeat>;

export const HeartbeatResponse = z.object({
  accepted: z.literal(true),
  /** The generation the control plane holds for this machine; a newer one than the agent's means "reconnect". */
  desiredGen: z.number().int().nonnegative(),
  heartbeatIntervalMs: z.number().int().positive(),
});
export type HeartbeatResponse = z.infer<typeof HeartbeatResponse>;
