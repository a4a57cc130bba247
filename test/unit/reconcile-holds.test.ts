import { describe, expect, it } from 'vitest';
import { reconcile, type ObservedMachine } from '../../functions/core/fleet/reconcile.js';
import { heldRefusal } from '../../functions/core/scheduler/place.js';
import { currentAssignment, desiredDeployment, observedMachine } from '../helpers/reconcile-fixtures.js';

/** Replicas and the holds of aged runs (docs/runs.md, "Aging"): a held machine takes no new replica set. */
const machine = (id: string, extra: Partial<ObservedMachine> = {}) => observedMachine(id, extra);

describe('replica placement and the holds of aged runs', () => {
  it('places a new set off a held machine, and says so for the held one', () => {
    const input = { deployments: [desiredDeployment({ replicas: 1 })], machines: [machine('m1', { heldFor: 'run_big' }), machine('m2')], assignments: [] };
    expect(reconcile(input)).toEqual([{ type: 'assign', deploymentId: 'dep_a', machineId: 'm2' }]);
  });

  it('leaves a set pending, naming the aged run, when every machine with room is held', () => {
    const actions = reconcile({ deployments: [desiredDeployment({ replicas: 1 })], machines: [machine('m1', { heldFor: 'run_big' })], assignments: [] });
    expect(actions).toEqual([{ type: 'pending', deploymentId: 'dep_a', missing: 1, rejected: [{ machineId: 'm1', reason: heldRefusal('run_big') }] }]);
  });

  it('never evicts a replica already on a held machine', () => {
    const actions = reconcile({
      deployments: [desiredDeployment({ replicas: 1 })],
      machines: [machine('m1', { heldFor: 'run_big' })],
      assignments: [currentAssignment('a1', 'm1')],
    });
    expect(actions).toEqual([]);
  });

  it('still lets a set already on the held machine replace its replica there (a rollout in place)', () => {
    const actions = reconcile({
      deployments: [desiredDeployment({ replicas: 1, templateHash: 'T2', generation: 2 })],
      machines: [machine('m1', { heldFor: 'run_big' })],
      assignments: [currentAssignment('a1', 'm1')],
    });
    expect(actions).toEqual([{ type: 'assign', deploymentId: 'dep_a', machineId: 'm1' }]);
  });

  it('keeps another set off the held machine even while one set may replace there', () => {
    const actions = reconcile({
      deployments: [desiredDeployment({ replicas: 1 }), desiredDeployment({ id: 'dep_b', replicas: 1 })],
      machines: [machine('m1', { heldFor: 'run_big' })],
      assignments: [currentAssignment('a1', 'm1')],
    });
    expect(actions).toEqual([{ type: 'pending', deploymentId: 'dep_b', missing: 1, rejected: [{ machineId: 'm1', reason: heldRefusal('run_big') }] }]);
  });
});
