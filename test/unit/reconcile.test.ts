import { describe, expect, it } from 'vitest';
import { planRollout, reconcile, type CurrentAssignment, type DesiredDeployment, type ObservedMachine } from '../../functions/core/fleet/reconcile.js';
import { machineMemoryMiB, placeReplica, type CandidateMachine } from '../../functions/core/scheduler/place.js';
import type { Inventory } from '../../shared/contracts/inventory.js';
import { currentAssignment, desiredDeployment, observedMachine } from '../helpers/reconcile-fixtures.js';

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

const machine = (id: string, extra: Partial<ObservedMachine> = {}) => observedMachine(id, { labels: { sim: 'true' }, ...extra }, inventory());
const deployment = (extra: Partial<DesiredDeployment> = {}) => desiredDeployment({ replicas: 2, selector: { sim: 'true' }, ...extra });
/** A current, serving replica unless told otherwise. */
const asg = currentAssignment;

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
    const assignments = [asg('a1', 'm1'), asg('a2', 'm2')];
    expect(reconcile({ deployments: [deployment()], machines: [machine('m1'), machine('m2'), machine('m3')], assignments })).toEqual([]);
  });

  it('keeps assignments on stale machines and counts them: sight was lost, the runtime may still run', () => {
    const assignments = [asg('a1', 'm1'), asg('a2', 'm2', { available: false })];
    const machines = [machine('m1'), machine('m2', { liveness: 'stale' }), machine('m3')];
    expect(reconcile({ deployments: [deployment()], machines, assignments })).toEqual([]);
  });

  it('unassigns from revoked machines and re-places the replica', () => {
    const assignments = [asg('a1', 'm1')];
    const actions = reconcile({ deployments: [deployment({ replicas: 1 })], machines: [machine('m1', { liveness: 'revoked' }), machine('m2')], assignments });
    expect(actions).toEqual([
      { type: 'unassign', assignmentId: 'a1', deploymentId: 'dep_a', machineId: 'm1', reason: 'machine revoked' },
      { type: 'assign', deploymentId: 'dep_a', machineId: 'm2' },
    ]);
  });

  it('scales down unavailable replicas first, and updates assignments of an older generation in place', () => {
    const assignments = [asg('a1', 'm1'), asg('a2', 'm2', { available: false })];
    const actions = reconcile({
      deployments: [deployment({ replicas: 1, generation: 2 })],
      machines: [machine('m1'), machine('m2', { liveness: 'stale' })],
      assignments,
    });
    expect(actions).toEqual([
      { type: 'unassign', assignmentId: 'a2', deploymentId: 'dep_a', machineId: 'm2', reason: 'scaled down' },
      { type: 'update', assignmentId: 'a1', deploymentId: 'dep_a', machineId: 'm1' },
    ]);
  });

  it('unassigns everything of a deleted deployment', () => {
    const assignments = [asg('a1', 'm1', { deploymentId: 'dep_gone' })];
    expect(reconcile({ deployments: [], machines: [machine('m1')], assignments })).toEqual([
      { type: 'unassign', assignmentId: 'a1', deploymentId: 'dep_gone', machineId: 'm1', reason: 'deployment deleted' },
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

describe('rollouts', () => {
  const fleet = [machine('m1'), machine('m2'), machine('m3'), machine('m4')];
  const four = (extra: Partial<CurrentAssignment> = {}) => ['m1', 'm2', 'm3', 'm4'].map((m, i) => asg(`a${i + 1}`, m, extra));

  it('scaling 4 -> 2 retires only the surplus, and leaves the survivors alone', () => {
    const actions = reconcile({ deployments: [deployment({ replicas: 2 })], machines: fleet, assignments: four() });
    expect(actions).toEqual([
      { type: 'unassign', assignmentId: 'a4', deploymentId: 'dep_a', machineId: 'm4', reason: 'scaled down' },
      { type: 'unassign', assignmentId: 'a3', deploymentId: 'dep_a', machineId: 'm3', reason: 'scaled down' },
    ]);
  });

  it('scaling 2 -> 4 adds replicas and touches none of the running ones', () => {
    const actions = reconcile({ deployments: [deployment({ replicas: 4 })], machines: fleet, assignments: [asg('a1', 'm1'), asg('a2', 'm2')] });
    expect(actions).toEqual([
      { type: 'assign', deploymentId: 'dep_a', machineId: 'm3' },
      { type: 'assign', deploymentId: 'dep_a', machineId: 'm4' },
    ]);
  });

  it('a generation bump with the same template updates in place: nothing is retired or added', () => {
    const actions = reconcile({ deployments: [deployment({ replicas: 4, generation: 2 })], machines: fleet, assignments: four() });
    expect(actions.map((a) => a.type)).toEqual(['update', 'update', 'update', 'update']);
  });

  it('a changed template surges one new replica first and retires nothing while it starts (maxSurge 1, maxUnavailable 0)', () => {
    const actions = reconcile({ deployments: [deployment({ replicas: 4, templateHash: 'T2', generation: 2 })], machines: fleet, assignments: four() });
    // Every machine holds an outdated replica: the new one may start beside one of them.
    expect(actions).toEqual([{ type: 'assign', deploymentId: 'dep_a', machineId: 'm1' }]);
  });

  it('retires one outdated replica once a new one serves, and surges the next', () => {
    const assignments = [...four({ templateHash: 'T1' }), asg('n1', 'm1', { templateHash: 'T2', deploymentGeneration: 2 })];
    const actions = reconcile({ deployments: [deployment({ replicas: 4, templateHash: 'T2', generation: 2 })], machines: fleet, assignments });
    expect(actions).toEqual([
      { type: 'unassign', assignmentId: 'a4', deploymentId: 'dep_a', machineId: 'm4', reason: 'rolled out' },
      { type: 'assign', deploymentId: 'dep_a', machineId: 'm2' },
    ]);
  });

  it('holds while the surged replica is not ready yet', () => {
    const assignments = [...four(), asg('n1', 'm1', { templateHash: 'T2', deploymentGeneration: 2, available: false })];
    expect(reconcile({ deployments: [deployment({ replicas: 4, templateHash: 'T2', generation: 2 })], machines: fleet, assignments })).toEqual([]);
  });

  it('retires outdated replicas that serve nothing at once', () => {
    const plan = planRollout({
      deployment: { templateHash: 'T2', replicas: 2, rollout: { maxSurge: 1, maxUnavailable: 0 } },
      assignments: [asg('a1', 'm1', { available: false }), asg('a2', 'm2')],
      drainingMachines: new Set(),
    });
    expect(plan.retire.map((r) => r.assignment.id)).toEqual(['a1']);
    // One outdated replica left: two new ones fit under replicas + maxSurge.
    expect(plan.add).toBe(2);
  });

  it('maxSurge 0 with maxUnavailable 1 retires first, then adds into the freed room', () => {
    const plan = planRollout({
      deployment: { templateHash: 'T2', replicas: 2, rollout: { maxSurge: 0, maxUnavailable: 1 } },
      assignments: [asg('a1', 'm1'), asg('a2', 'm2')],
      drainingMachines: new Set(),
    });
    expect(plan.retire.map((r) => [r.assignment.id, r.reason])).toEqual([['a2', 'rolled out']]);
    expect(plan.add).toBe(1);
  });

  it('completes: nothing to do once every replica is current', () => {
    const plan = planRollout({
      deployment: { templateHash: 'T2', replicas: 2, rollout: { maxSurge: 1, maxUnavailable: 0 } },
      assignments: [asg('n1', 'm1', { templateHash: 'T2' }), asg('n2', 'm2', { templateHash: 'T2' })],
      drainingMachines: new Set(),
    });
    expect(plan).toEqual({ retire: [], add: 0 });
  });

  it('drain: starts the replacement elsewhere, then retires the drained replica once it serves', () => {
    const machines = [machine('m1', { draining: true, cordoned: true }), machine('m2')];
    const first = reconcile({ deployments: [deployment({ replicas: 1 })], machines, assignments: [asg('a1', 'm1')] });
    expect(first).toEqual([{ type: 'assign', deploymentId: 'dep_a', machineId: 'm2' }]);
    const waiting = reconcile({ deployments: [deployment({ replicas: 1 })], machines, assignments: [asg('a1', 'm1'), asg('a2', 'm2', { available: false })] });
    expect(waiting).toEqual([]);
    const done = reconcile({ deployments: [deployment({ replicas: 1 })], machines, assignments: [asg('a1', 'm1'), asg('a2', 'm2')] });
    expect(done).toEqual([{ type: 'unassign', assignmentId: 'a1', deploymentId: 'dep_a', machineId: 'm1', reason: 'machine drained' }]);
  });

  it('drain with nowhere to go keeps the replica serving and says why', () => {
    const machines = [machine('m1', { draining: true, cordoned: true }), machine('m2', { labels: {} })];
    const actions = reconcile({ deployments: [deployment({ replicas: 1 })], machines, assignments: [asg('a1', 'm1')] });
    expect(actions).toEqual([
      {
        type: 'pending',
        deploymentId: 'dep_a',
        missing: 1,
        rejected: [
          { machineId: 'm1', reason: 'machine is cordoned' },
          { machineId: 'm2', reason: 'label sim=true not present' },
        ],
      },
    ]);
  });

  it('cordon stops placements only: replicas on a cordoned machine stay', () => {
    const machines = [machine('m1', { cordoned: true }), machine('m2')];
    expect(reconcile({ deployments: [deployment({ replicas: 1 })], machines, assignments: [asg('a1', 'm1')] })).toEqual([]);
  });
});

describe('placeReplica scoring', () => {
  const candidate = (id: string, assignments: number, memoryMiB = 0): CandidateMachine => ({
    ...machine(id),
    reserved: { gpus: 0, memoryMiB, assignments },
    deploymentIds: new Set(),
  });
  it('prefers fewer assignments, then more free memory, then the lower id', () => {
    const request = { deploymentId: 'd', model: 'chat', selector: {}, gpus: 0, memoryMiB: 1 };
    expect(placeReplica([candidate('b', 1), candidate('a', 2)], request).machineId).toBe('b');
    expect(placeReplica([candidate('b', 1, 0), candidate('a', 1, 4096)], request).machineId).toBe('b');
    expect(placeReplica([candidate('b', 1), candidate('a', 1)], request).machineId).toBe('a');
  });
  it('among equally loaded machines prefers one where the model is warm, then the lighter reported load', () => {
    const request = { deploymentId: 'd', model: 'chat', selector: {}, gpus: 0, memoryMiB: 1 };
    expect(placeReplica([candidate('a', 1), { ...candidate('b', 1), warmModels: ['chat'] }], request).machineId).toBe('b');
    expect(placeReplica([candidate('a', 0), { ...candidate('b', 1), warmModels: ['chat'] }], request).machineId).toBe('a');
    expect(
      placeReplica(
        [
          { ...candidate('a', 1), load: 9 },
          { ...candidate('b', 1), load: 2 },
        ],
        request,
      ).machineId,
    ).toBe('b');
  });
  it('uses discrete GPU memory when present and host memory on unified-memory machines', () => {
    const discrete = inventory(1000, 0);
    discrete.gpus = [
      { ...inventory().gpus[0]!, unifiedMemory: false, memoryTotalMiB: 81559 },
      { ...inventory().gpus[0]!, unifiedMemory: false, memoryTotalMiB: 81559 },
    ];
    expect(machineMemoryMiB(discrete)).toBe(163118);
    expect(machineMemoryMiB(inventory(131072))).toBe(131072);
  });
});
