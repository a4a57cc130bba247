import type { QueueMachine } from '../../functions/core/runs/hosts.js';
import type { GroupDemand } from '../../functions/core/runs/demand.js';
import type { QueuedRun, QueueWorkspace } from '../../functions/core/runs/queue.js';
import type { Inventory } from '../../shared/contracts/inventory.js';
import { TEST_INVENTORY, testGpu } from './machine.js';

/** Builders of the run cores' pure inputs, shared by their suites: defaults, overridden per test. */

const inventories = new Map<string, Inventory>();
/** One inventory object per shape, as a fleet shares them: capacity is derived once per object. */
export function gpuInventory(gpus: number, gpuMiB = 81_920, cpus = 64): Inventory {
  const key = `${gpus}/${gpuMiB}/${cpus}`;
  let inventory = inventories.get(key);
  if (!inventory) {
    inventory = { ...TEST_INVENTORY, cpus, gpus: Array.from({ length: gpus }, (_, i) => testGpu(i, gpuMiB)) };
    inventories.set(key, inventory);
  }
  return inventory;
}

/** A machine of the fleet's pool unless told otherwise: enrolled by `ws_fleet`, shared with every workspace. */
export const machine = (id: string, extra: Partial<QueueMachine> = {}): QueueMachine => ({
  id,
  workspaceId: 'ws_fleet',
  shared: true,
  labels: {},
  liveness: 'ready',
  cordoned: false,
  draining: false,
  inventory: gpuInventory(8),
  warmModels: [],
  cachedVersions: [],
  load: 0,
  reserved: { gpus: 0, memoryMiB: 0, assignments: 0 },
  deploymentIds: new Set(),
  replicaFailures: new Map(),
  ...extra,
});

/** `count` machines m00, m01, ... of 8 GPUs. */
export const fleet = (count: number, extra: Partial<QueueMachine> = {}) =>
  Array.from({ length: count }, (_, i) => machine(`m${String(i).padStart(2, '0')}`, extra));

export const group = (workers: number, gpus = 1, extra: Partial<GroupDemand['need']> = {}, name: string | null = null): GroupDemand => ({
  name,
  workers,
  need: { gpus, cores: 0, memoryMiB: 0, gpuMemoryMiB: 0, ...extra },
});

export const run = (id: string, extra: Partial<QueuedRun> = {}): QueuedRun => ({
  id,
  workspaceId: 'ws_a',
  priority: 0,
  submittedAt: 0,
  waitingSince: 0,
  notBefore: null,
  groups: [group(1)],
  selector: {},
  ...extra,
});

export const workspace = (id: string, extra: Partial<QueueWorkspace> = {}): QueueWorkspace => ({
  id,
  weight: 1,
  priorityCeiling: 1000,
  quota: {},
  usage: { gpus: 0, memoryMiB: 0, replicas: 0 },
  gpuSeconds: 0,
  ...extra,
});
