import { z } from 'zod';
import { EngineSample, GpuSample } from './telemetry.js';
import { Labels } from './common.js';
import { Inventory } from './inventory.js';
import { MachineStatus, RuntimeState, StartupProgress } from './heartbeat.js';
import { pageOf } from './page.js';

/** How the control plane sees a machine: derived from heartbeats with the database's clock. */
export const MachineLiveness = z.enum(['pending', 'ready', 'stale', 'down', 'revoked']);
export type MachineLiveness = z.infer<typeof MachineLiveness>;

/** What the control plane believes of a runtime; `stale` and `down` mean sight was lost, not that it stopped. */
export const RuntimeLiveness = z.enum([...RuntimeState.options, 'stale', 'down']);
export type RuntimeLiveness = z.infer<typeof RuntimeLiveness>;

export const RuntimeView = z.object({
  assignmentId: z.string(),
  deploymentId: z.string(),
  deploymentName: z.string(),
  model: z.string(),
  /** False once the replica left desired state: its node is draining and stopping it. */
  desired: z.boolean(),
  reportedState: RuntimeState.nullable(),
  state: RuntimeLiveness,
  gen: z.number().int().nullable(),
  restarts: z.number().int(),
  message: z.string().nullable(),
  reportedAgeMs: z.number().int().nullable(),
  routable: z.boolean(),
  /** As the agent reported them (observed, never assumed). */
  warm: z.boolean(),
  activeInvocations: z.number().int(),
  queueDepth: z.number().int(),
  /**
   * Its engine's own metrics as its agent last read them (docs/telemetry.md); null when it has none. Defaulted, so
   * that a client reading a control plane older than telemetry still parses its machines.
   */
  engine: EngineSample.nullable().default(null),
  progress: StartupProgress.nullable(),
});
export type RuntimeView = z.infer<typeof RuntimeView>;

/**
 * A replica that failed for good on the machine (its runtime used up its restarts): it was placed elsewhere, and
 * no replica of that deployment is placed here again until an operator clears the mark.
 */
const ReplicaFailureView = z.object({
  deploymentId: z.string(),
  deploymentName: z.string(),
  assignmentId: z.string(),
  reason: z.string(),
  failedAt: z.string(),
});

/** GPUs, memory (as placement counts it: GPU memory on discrete-GPU machines, host memory elsewhere) and cores. */
const ResourceAmounts = z.object({ gpus: z.number().int(), memoryMiB: z.number().int(), cores: z.number().int() });

/**
 * What a machine offers and what is reserved of it, as placement counts them: by its replicas (desired assignments)
 * and by run workers (placed until released, kept while sight of the machine is lost), and what is left free.
 */
const MachineResources = z.object({ capacity: ResourceAmounts, replicas: ResourceAmounts, workers: ResourceAmounts, free: ResourceAmounts });

export const MachineView = z.object({
  id: z.string(),
  name: z.string(),
  workspaceId: z.string(),
  labels: Labels,
  state: MachineLiveness,
  /** What the agent last said of itself (draining while it shuts down, degraded while a runtime failed). */
  reportedStatus: MachineStatus.nullable(),
  streamAttached: z.boolean(),
  heartbeatAgeMs: z.number().int().nullable(),
  lastHeartbeatAt: z.string().nullable(),
  desiredGen: z.number().int(),
  reportedGen: z.number().int().nullable(),
  cordoned: z.boolean(),
  /** An operator asked to move every replica off it; placements stop too. */
  draining: z.boolean(),
  /** Draining and empty: nothing desired on it and nothing reported running. */
  drained: z.boolean(),
  /** Lent to the fleet's run queue: runs of every workspace may place workers on it; its replicas stay its workspace's. */
  shared: z.boolean(),
  revokedAt: z.string().nullable(),
  credentialExpiresAt: z.string().nullable(),
  inventory: Inventory,
  resources: MachineResources,
  warmModels: z.array(z.string()),
  /** Its GPUs as its agent last sampled them (docs/telemetry.md); empty while it is not ready (or from an older plane). */
  gpus: z.array(GpuSample).default([]),
  runtimes: z.array(RuntimeView),
  /** Open replica failures, oldest first: what an operator should look at (`POST /machines/{id}/clear-failures` clears them). */
  attention: z.array(ReplicaFailureView),
  createdAt: z.string(),
});
export type MachineView = z.infer<typeof MachineView>;

export const MachineList = pageOf(MachineView);
export type MachineList = z.infer<typeof MachineList>;
