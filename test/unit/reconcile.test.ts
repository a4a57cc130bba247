import { describe, expect, it } from 'vitest';
import { reconcile, type DesiredDeployment, type ObservedMachine } from '../../functions/controller/reconcile.js';
import { machineMemoryMiB, placeReplica, type CandidateMachine } from '../../functions/scheduler/place.js';
import type { Inventory } from '../../shared/contracts/inventory.js';

const inventory = (memoryTotalMiB = 131072, gpus = 1): Inventory => ({
  hostname: 'h',
  os: 'linux',
  arch: 'arm64',
  cpus: 20,
  cpuModel: null,
  memoryTotalMiB,
  memoryAvailableMiB: null,
  diskFreeMiB: null,
  gpus: Array.from({ length: gpus }, (_, index) => ({
    index,
    uuid: null,
    name: 'NVIDIA GB10',
    memoryTotalMiB,
    memoryUsedMiB: null,
    unifiedMemory: true,
    driverVersion: null,
    utilizationPercent: null,
    temperatureC: null,
    powerDrawW: null,
  })),
  agentVersion: 't',
});

const machine = (id: string, extra: Partial<ObservedMachine> = {}): ObservedMachine => ({
  id,
  labels: { sim: 'true' },
  liveness: 'ready',
  cordoned: false,
  draining: false,
  inventory: inventory(),
  ...extra,
});
const deployment = (extra: Partial<DesiredDeployment> = {}): DesiredDeployment => ({
  id: 'dep_a',
  generation: 1,
  replicas: 2,
  selector: { sim: 'true' },
  gpus: 0,
  memoryMiB: 1024,
  deleted: false,
  ...extra,
});

describe('reconcile', () => {
  it('places missing replicas on distinct ready machines, deterministically', () => {
    const input = { deployments: [deployment()], machines: [machine('m3'), machine('m1'), machine('m2')], assignments: [] };
    const actions = reconcile(input);
    expect(actions).toEqual([
      { type: 'assign', deploymentId: 'dep_a', machineId: 'm1' },
      { type: 'assign', deploymentId: 'dep_a', machineId: 'm2' },
    ]);
    expect(reconcile(input)).toEqual(actions);
  });

  it('is a no-op when desired and current agree', () => {
    const assignments = [
      { id: 'a1', machineId: 'm1', deploymentId: 'dep_a', deploymentGeneration: 1 },
      { id: 'a2', machineId: 'm2', deploymentId: 'dep_a', deploymentGeneration: 1 },
    ];
    expect(reconcile({ deployments: [deployment()], machines: [machine('m1'), machine('m2'), machine('m3')], assignments })).toEqual([]);
  });

  it('keeps assignments on stale and down machines (resources stay reserved) and does not double-place', () => {
    const assignments = [
      { id: 'a1', machineId: 'm1', deploymentId: 'dep_a', deploymentGeneration: 1 },
      { id: 'a2', machineId: 'm2', deploymentId: 'dep_a', deploymentGeneration: 1 },
    ];
    const machines = [machine('m1', { liveness: 'down' }), machine('m2', { liveness: 'stale' }), machine('m3')];
    expect(reconcile({ deployments: [deployment()], machines, assignments })).toEqual([]);
  });

  it('unassigns from revoked machines and re-places the replica', () => {
    const assignments = [{ id: 'a1', machineId: 'm1', deploymentId: 'dep_a', deploymentGeneration: 1 }];
    const actions = reconcile({ deployments: [deployment({ replicas: 1 })], machines: [machine('m1', { liveness: 'revoked' }), machine('m2')], assignments });
    expect(actions).toEqual([
      { type: 'unassign', assignmentId: 'a1', machineId: 'm1', reason: 'machine revoked' },
      { type: 'assign', deploymentId: 'dep_a', machineId: 'm2' },
    ]);
  });

  it('scales down from unhealthy machines first, and updates assignments of an older generation', () => {
    const assignments = [
      { id: 'a1', machineId: 'm1', deploymentId: 'dep_a', deploymentGeneration: 1 },
      { id: 'a2', machineId: 'm2', deploymentId: 'dep_a', deploymentGeneration: 1 },
    ];
    const actions = reconcile({ deployments: [deployment({ replicas: 1, generation: 2 })], machines: [machine('m1'), machine('m2', { liveness: 'down' })], assignments });
    expect(actions).toEqual([
      { type: 'unassign', assignmentId: 'a2', machineId: 'm2', reason: 'scaled down' },
      { type: 'update', assignmentId: 'a1', deploymentId: 'dep_a', machineId: 'm1' },
    ]);
  });

  it('unassigns everything of a deleted deployment', () => {
    const assignments = [{ id: 'a1', machineId: 'm1', deploymentId: 'dep_gone', deploymentGeneration: 1 }];
    expect(reconcile({ deployments: [], machines: [machine('m1')], assignments })).toEqual([
      { type: 'unassign', assignmentId: 'a1', machineId: 'm1', reason: 'deployment deleted' },
    ]);
  });

  it('reports a pending deployment with every rejection explained', () => {
    const machines = [
      machine('m1', { cordoned: true }),
      machine('m2', { labels: {} }),
      machine('m3', { liveness: 'stale' }),
      machine('m4', { draining: true }),
      machine('m5', { inventory: inventory(512) }),
    ];
    const [action] = reconcile({ deployments: [deployment({ replicas: 1 })], machines, assignments: [] });
    expect(action).toEqual({
      type: 'pending',
      deploymentId: 'dep_a',
      missing: 1,
      rejected: [
        { machineId: 'm1', reason: 'machine is cordoned' },
        { machineId: 'm2', reason: 'label sim=true not present' },
        { machineId: 'm3', reason: 'machine is stale' },
        { machineId: 'm4', reason: 'machine is draining' },
        { machineId: 'm5', reason: 'needs 1024 MiB, 512 MiB free' },
      ],
    });
  });

  it('never overcommits GPUs across deployments placed in one pass', () => {
    const a = deployment({ id: 'dep_a', replicas: 1, gpus: 1 });
    const b = deployment({ id: 'dep_b', replicas: 1, gpus: 1 });
    const actions = reconcile({ deployments: [a, b], machines: [machine('m1')], assignments: [] });
    expect(actions[0]).toEqual({ type: 'assign', deploymentId: 'dep_a', machineId: 'm1' });
    expect(actions[1]).toMatchObject({ type: 'pending', deploymentId: 'dep_b', rejected: [{ machineId: 'm1', reason: 'needs 1 GPUs, 0 free' }] });
  });
});

describe('placeReplica scoring', () => {
  const candidate = (id: string, assignments: number, memoryMiB = 0): CandidateMachine => ({
    ...machine(id),
    reserved: { gpus: 0, memoryMiB, assignments },
    deploymentIds: new Set(),
  });
  it('prefers fewer assignments, then more free memory, then the lower id', () => {
    const request = { deploymentId: 'd', selector: {}, gpus: 0, memoryMiB: 1 };
    expect(placeReplica([candidate('b', 1), candidate('a', 2)], request).machineId).toBe('b');
    expect(placeReplica([candidate('b', 1, 0), candidate('a', 1, 4096)], request).machineId).toBe('b');
    expect(placeReplica([candidate('b', 1), candidate('a', 1)], request).machineId).toBe('a');
  });
  it('uses discrete GPU memory when present and host memory on unified-memory machines', () => {
    const discrete = inventory(1000, 0);
    discrete.gpus = [{ ...inventory().gpus[0]!, unifiedMemory: false, memoryTotalMiB: 81559 }, { ...inventory().gpus[0]!, unifiedMemory: false, memoryTotalMiB: 81559 }];
    expect(machineMemoryMiB(discrete)).toBe(163118);
    expect(machineMemoryMiB(inventory(131072))).toBe(131072);
  });
});
