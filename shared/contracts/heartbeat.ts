import { z } from 'zod';

export const RuntimeState = z.enum(['preparing', 'pulling', 'starting', 'ready', 'draining', 'failed', 'stopped']);
export type RuntimeState = z.infer<typeof RuntimeState>;

/** How long a runtime has been preparing, pulling or starting, against its start timeout. */
export const StartupProgress = z.object({ elapsedMs: z.number().int().nonnegative(), timeoutMs: z.number().int().positive() });
export type StartupProgress = z.infer<typeof StartupProgress>;

export const RuntimeReport = z.object({
  assignmentId: z.string().max(64),
  deploymentId: z.string().max(64),
  state: RuntimeState,
  /** The desired-state generation this runtime runs under. */
  gen: z.number().int().nonnegative(),
  /** Invocations whose runtime answer is streaming (the runtime's response head arrived). */
  activeInvocations: z.number().int().nonnegative(),
  /** Invocations the agent accepted and handed to the runtime that have no response head yet. */
  queueDepth: z.number().int().nonnegative(),
  /** Ready and served an invocation within the last 5 minutes (caches hot): routing's tie-break prefers it. */
  warm: z.boolean(),
  /** While preparing, pulling or starting: how long it has been at it, against its start timeout. */
  progress: StartupProgress.nullable(),
  restarts: z.number().int().nonnegative(),
  /** Short operator-facing reason for `failed`; never a payload. */
  message: z.string().max(500).nullable(),
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
  machineId: z.string().max(64),
  bootId: z.string().min(8).max(64),
  seq: z.number().int().nonnegative(),
  status: MachineStatus,
  gen: z.number().int().nonnegative(),
  runtimes: z.array(RuntimeReport).max(64),
  /** Models loaded in a ready runtime on this machine. */
  warmModels: z.array(z.string().max(200)).max(64),
  /** Bounded numeric metrics; names are fixed by the agent, values are gauges. */
  metrics: z.record(z.string().max(64), z.number()).refine((m) => Object.keys(m).length <= 64, 'at most 64 metrics'),
});
export type Heartbeat = z.infer<typeof Heartbeat>;

export const HeartbeatResponse = z.object({
  accepted: z.literal(true),
  /** The generation the control plane holds for this machine; a newer one than the agent's means "reconnect". */
  desiredGen: z.number().int().nonnegative(),
  heartbeatIntervalMs: z.number().int().positive(),
});
export type HeartbeatResponse = z.infer<typeof HeartbeatResponse>;
