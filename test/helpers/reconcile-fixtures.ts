import type { CurrentAssignment, DesiredDeployment, ObservedMachine } from '../../functions/controller/reconcile.js';
import type { Inventory } from '../../shared/contracts/inventory.js';
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
  memoryMiB: 1024,
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
