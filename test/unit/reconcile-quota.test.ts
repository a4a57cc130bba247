import { describe, expect, it } from 'vitest';
import { reconcile } from '../../functions/core/fleet/reconcile.js';
import { NO_USAGE, quotaRefusal } from '../../functions/core/scheduler/quota.js';
import { currentAssignment as asg, desiredDeployment as deployment, observedMachine } from '../helpers/reconcile-fixtures.js';

describe('quotaRefusal', () => {
  it('unbounded without a quota, and a need of nothing passes a GPU or memory quota', () => {
    expect(quotaRefusal({}, { gpus: 1e6, memoryMiB: 1e9, replicas: 1e6 }, { gpus: 8, memoryMiB: 1 })).toBeNull();
    expect(quotaRefusal({ gpus: 0, memoryMiB: 0 }, NO_USAGE, { gpus: 0, memoryMiB: 0 })).toBeNull();
  });

  it('refuses GPUs, then memory, then replicas, each with what it needs and what is left', () => {
    const quota = { gpus: 4, memoryMiB: 8192, replicas: 3 };
    expect(quotaRefusal(quota, { gpus: 4, memoryMiB: 0, replicas: 0 }, { gpus: 1, memoryMiB: 0 })).toBe('workspace quota: needs 1 GPU, 0 of 4 left');
    expect(quotaRefusal(quota, { gpus: 1, memoryMiB: 0, replicas: 0 }, { gpus: 4, memoryMiB: 0 })).toBe('workspace quota: needs 4 GPUs, 3 of 4 left');
    expect(quotaRefusal(quota, { gpus: 4, memoryMiB: 8192, replicas: 3 }, { gpus: 1, memoryMiB: 1 })).toBe('workspace quota: needs 1 GPU, 0 of 4 left');
    expect(quotaRefusal(quota, { gpus: 0, memoryMiB: 6144, replicas: 0 }, { gpus: 0, memoryMiB: 4096 })).toBe(
      'workspace quota: needs 4096 MiB, 2048 of 8192 MiB left',
    );
    expect(quotaRefusal(quota, { gpus: 0, memoryMiB: 0, replicas: 3 }, { gpus: 0, memoryMiB: 0 })).toBe('workspace quota: needs 1 replica, 0 of 3 left');
    // Exactly full fits; past a quota lowered below its usage, nothing is left (never a negative count).
    expect(quotaRefusal(quota, { gpus: 3, memoryMiB: 4096, replicas: 2 }, { gpus: 1, memoryMiB: 4096 })).toBeNull();
    expect(quotaRefusal({ gpus: 2 }, { gpus: 5, memoryMiB: 0, replicas: 0 }, { gpus: 1, memoryMiB: 0 })).toBe('workspace quota: needs 1 GPU, 0 of 2 left');
  });
});

describe('the reconciler under a workspace quota', () => {
  const machines = ['m1', 'm2', 'm3', 'm4'].map((id) => observedMachine(id));

  it('places up to the quota, then reports the rest pending with the quota reason', () => {
    const actions = reconcile({ deployments: [deployment({ replicas: 4, memoryMiB: 1024 })], machines, assignments: [], quota: { memoryMiB: 2048 } });
    expect(actions).toEqual([
      { type: 'assign', deploymentId: 'dep_a', machineId: 'm1' },
      { type: 'assign', deploymentId: 'dep_a', machineId: 'm2' },
      { type: 'pending', deploymentId: 'dep_a', missing: 2, reason: 'workspace quota: needs 1024 MiB, 0 of 2048 MiB left', rejected: [] },
    ]);
  });

  it('counts every desired replica of the workspace: other sets, held sets, and their own specs', () => {
    const held = deployment({ id: 'dep_held', hold: 'alias chat not found', replicas: 1 });
    const assignments = [asg('h1', 'm1', { deploymentId: 'dep_held', resources: { gpus: 0, memoryMiB: 3072 } }), asg('b1', 'm2', { deploymentId: 'dep_b' })];
    const actions = reconcile({
      deployments: [held, deployment({ id: 'dep_b', replicas: 1 }), deployment({ id: 'dep_c', replicas: 1 })],
      machines,
      assignments,
      quota: { memoryMiB: 4096 },
    });
    expect(actions).toEqual([
      { type: 'pending', deploymentId: 'dep_held', missing: 0, reason: 'alias chat not found', rejected: [] },
      { type: 'pending', deploymentId: 'dep_c', missing: 1, reason: 'workspace quota: needs 1024 MiB, 0 of 4096 MiB left', rejected: [] },
    ]);
  });

  it('the replica count bounds sets that reserve nothing; sets are served in id order', () => {
    const free = (id: string) => deployment({ id, replicas: 2, memoryMiB: 0 });
    const actions = reconcile({ deployments: [free('dep_b'), free('dep_a')], machines, assignments: [], quota: { replicas: 3 } });
    expect(actions.map((a) => [a.type, a.deploymentId])).toEqual([
      ['assign', 'dep_a'],
      ['assign', 'dep_a'],
      ['assign', 'dep_b'],
      ['pending', 'dep_b'],
    ]);
    expect(actions[3]).toMatchObject({ missing: 1, reason: 'workspace quota: needs 1 replica, 0 of 3 left' });
  });

  it('what this pass retires frees quota for what it places: a rollout with maxUnavailable proceeds at a full quota', () => {
    const assignments = [asg('a1', 'm1'), asg('a2', 'm2')];
    const actions = reconcile({
      deployments: [deployment({ replicas: 2, templateHash: 'T2', rollout: { maxSurge: 0, maxUnavailable: 1 } })],
      machines,
      assignments,
      quota: { replicas: 2 },
    });
    expect(actions).toEqual([
      { type: 'unassign', assignmentId: 'a2', deploymentId: 'dep_a', machineId: 'm2', reason: 'rolled out' },
      { type: 'assign', deploymentId: 'dep_a', machineId: 'm3' },
    ]);
    // With a surge and no room, it waits and says why.
    const surge = reconcile({ deployments: [deployment({ replicas: 2, templateHash: 'T2' })], machines, assignments, quota: { replicas: 2 } });
    expect(surge).toEqual([{ type: 'pending', deploymentId: 'dep_a', missing: 1, reason: 'workspace quota: needs 1 replica, 0 of 2 left', rejected: [] }]);
  });

  it('a lost replica keeps its reservation in the quota until it is retired: its replacement needs room', () => {
    const down = [observedMachine('m1', { liveness: 'down' }), observedMachine('m2')];
    const actions = reconcile({
      deployments: [deployment({ replicas: 1, gpus: 0, memoryMiB: 1024 })],
      machines: down,
      assignments: [asg('a1', 'm1', { available: false })],
      quota: { memoryMiB: 1024 },
    });
    expect(actions).toEqual([
      { type: 'pending', deploymentId: 'dep_a', missing: 1, reason: 'workspace quota: needs 1024 MiB, 0 of 1024 MiB left', rejected: [] },
    ]);
  });

  it('a replica that failed for good leaves the quota with its retirement', () => {
    const actions = reconcile({
      deployments: [deployment({ replicas: 1 })],
      machines,
      assignments: [asg('a1', 'm1', { failure: 'exit 1' })],
      quota: { replicas: 1 },
    });
    expect(actions).toEqual([
      { type: 'fail', assignmentId: 'a1', deploymentId: 'dep_a', machineId: 'm1', reason: 'exit 1' },
      { type: 'assign', deploymentId: 'dep_a', machineId: 'm2' },
    ]);
  });
});
