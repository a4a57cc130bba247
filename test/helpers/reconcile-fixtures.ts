import type { CurrentAssignment, DesiredDeployment, ObservedMachine } from '../../functions/core/fleet/reconcile.js';
import type { Inventory } from '../../shared/contracts/inventory.js';
import type { deployments } from '../../functions/store/schema/index.js';
import { TEST_INVENTORY } from './machine.js';

/** Builders of the reconciler's pure inputs, shared by the suites about it: defaults, overridden per test. */
export const observedMachine = (id: string, extra: Partial<ObservedMachine> = {}, inventory: Inventory = TEST_INVENTORY): ObservedMachine => ({
  id,
  labels: {},
  liveness: 'ready',
  cordoned: false,
  draining: false,
  inventory,
  warmModels: [],
  cachedVersions: [],
  load: 0,
  replicaFailures: new Map(),
  ...extra,
});

export const desiredDeployment = (extra: Partial<DesiredDeployment> = {}): DesiredDeployment => ({
  id: 'dep_a',
  model: 'chat',
  generation: 1,
  replicas: 1,
  selector: {},
  gpus: 0,
  gpuMemoryMiB: 0,
  memoryMiB: 1024,
  replicasPerMachine: 1,
  versionId: null,
  constraints: [],
  hold: null,
  templateHash: 'T1',
  rollout: { maxSurge: 1, maxUnavailable: 0 },
  deleted: false,
  ...extra,
});

export const currentAssignment = (id: string, machineId: string, extra: Partial<CurrentAssignment> = {}): CurrentAssignment => ({
  id,
  machineId,
  deploymentId: 'dep_a',
  deploymentGeneration: 1,
  templateHash: 'T1',
  available: true,
  failure: null,
  ...extra,
});

type DeploymentRow = typeof deployments.$inferSelect;

/** A deployments row as the store returns it: a simulated `chat` of one replica in workspace `ws_1`. */
export const deploymentRow = (extra: Partial<DeploymentRow> = {}): DeploymentRow => ({
  id: 'dep_a',
  workspaceId: 'ws_1',
  name: 'chat',
  model: 'chat',
  runtime: { kind: 'simulated', model: 'chat', ttftMs: 1, tokensPerSecond: 1, loadMs: 1, memoryMiB: 1, failureRate: 0 },
  artifact: null,
  restartPolicy: { mode: 'on-failure', maxRestarts: 2, backoffMs: 100 },
  replicas: 1,
  selector: {},
  source: null,
  canary: null,
  gpus: 0,
  gpuMemoryMiB: 0,
  replicasPerMachine: 1,
  memoryMiB: 64,
  dataClass: null,
  scaleToZero: null,
  autoscale: null,
  autoscaleState: null,
  asleepSince: null,
  wokenAt: null,
  maxConcurrency: 16,
  queueCapacity: 256,
  startup: { timeoutMs: 60_000, probeIntervalMs: 1_000, failureThreshold: 3 },
  rollout: { maxSurge: 1, maxUnavailable: 0 },
  generation: 1,
  createdAt: new Date('2026-12-01T00:00:00Z'),
  updatedAt: new Date('2026-12-01T00:00:00Z'),
  deletedAt: null,
  ...extra,
});
