import { describe, expect, it } from 'vitest';
import { reconcile, type ObservedMachine } from '../../functions/core/fleet/reconcile.js';
import { replacementPause } from '../../functions/core/fleet/lost-machines.js';
import type { MachineLiveness } from '../../shared/contracts/machine.js';
import { currentAssignment as asg, desiredDeployment, observedMachine } from '../helpers/reconcile-fixtures.js';

const fleet = (...liveness: MachineLiveness[]): ObservedMachine[] => liveness.map((l, i) => observedMachine(`m${i + 1}`, { liveness: l }));
const deployment = desiredDeployment;

describe('replicas on a down machine are lost and replaced', () => {
  it('a replica on a down machine is replaced elsewhere; the lost one stays desired and reserved', () => {
    const actions = reconcile({
      deployments: [deployment({ replicas: 2 })],
      machines: fleet('down', 'ready', 'ready', 'ready'),
      assignments: [asg('a1', 'm1', { available: false }), asg('a2', 'm2')],
    });
    expect(actions).toEqual([{ type: 'assign', deploymentId: 'dep_a', machineId: 'm3' }]);
  });

  it('a replica on a stale machine is kept and counted: stale is lost sight, not a lost machine', () => {
    expect(
      reconcile({
        deployments: [deployment({ replicas: 2 })],
        machines: fleet('stale', 'ready', 'ready', 'ready'),
        assignments: [asg('a1', 'm1', { available: false }), asg('a2', 'm2')],
      }),
    ).toEqual([]);
  });

  it('once the machine returns, its runtime is re-adopted: the replacement still starting is the surplus retired', () => {
    const assignments = [asg('a1', 'm1', { available: true }), asg('a2', 'm2'), asg('r1', 'm3', { available: false })];
    expect(reconcile({ deployments: [deployment({ replicas: 2 })], machines: fleet('ready', 'ready', 'ready', 'ready'), assignments })).toEqual([
      { type: 'unassign', assignmentId: 'r1', deploymentId: 'dep_a', machineId: 'm3', reason: 'scaled down' },
    ]);
  });

  it('while the machine is still down the replacement and the lost replica both stay, and nothing more is placed', () => {
    const assignments = [asg('a1', 'm1', { available: false }), asg('a2', 'm2'), asg('r1', 'm3', { available: false })];
    expect(reconcile({ deployments: [deployment({ replicas: 2 })], machines: fleet('down', 'ready', 'ready', 'ready'), assignments })).toEqual([]);
  });

  it('lost replicas beyond the desired count are retired (scaled to zero: all of them)', () => {
    const lost = [asg('a1', 'm1', { available: false }), asg('a2', 'm2', { available: false })];
    const machines = fleet('down', 'down', 'ready', 'ready', 'ready');
    const one = reconcile({ deployments: [deployment({ replicas: 1 })], machines, assignments: lost });
    expect(one).toEqual([
      { type: 'unassign', assignmentId: 'a2', deploymentId: 'dep_a', machineId: 'm2', reason: 'scaled down' },
      { type: 'assign', deploymentId: 'dep_a', machineId: 'm3' },
    ]);
    expect(reconcile({ deployments: [deployment({ replicas: 0 })], machines, assignments: lost }).map((a) => a.type === 'unassign' && a.assignmentId)).toEqual([
      'a2',
      'a1',
    ]);
  });

  it('a lost replica is replaced even when the rollout allows no surge', () => {
    const actions = reconcile({
      deployments: [deployment({ replicas: 1, rollout: { maxSurge: 0, maxUnavailable: 1 } })],
      machines: fleet('down', 'ready'),
      assignments: [asg('a1', 'm1', { available: false })],
    });
    expect(actions).toEqual([{ type: 'assign', deploymentId: 'dep_a', machineId: 'm2' }]);
  });

  it('a lost outdated replica serves nothing: the rollout retires it', () => {
    const actions = reconcile({
      deployments: [deployment({ replicas: 1, templateHash: 'T2' })],
      machines: fleet('down', 'ready'),
      assignments: [asg('a1', 'm1', { available: false })],
    });
    expect(actions).toEqual([
      { type: 'unassign', assignmentId: 'a1', deploymentId: 'dep_a', machineId: 'm1', reason: 'rolled out' },
      { type: 'assign', deploymentId: 'dep_a', machineId: 'm2' },
    ]);
  });
});

describe('replacement pauses when many machines go silent at once', () => {
  const PAUSED = 'replacement paused: 3 of 4 machines are silent; likely a partition, not failures';

  it('3 of 4 silent: nothing is replaced, and the set reports its lost replicas pending with the count', () => {
    const assignments = [asg('a1', 'm1', { available: false }), asg('a2', 'm2', { available: false }), asg('a4', 'm4')];
    const actions = reconcile({ deployments: [deployment({ replicas: 3 })], machines: fleet('down', 'down', 'stale', 'ready'), assignments });
    expect(actions).toEqual([{ type: 'pending', deploymentId: 'dep_a', missing: 2, reason: PAUSED, rejected: [] }]);
  });

  it('scaling up still places while paused, beside the paused report', () => {
    const actions = reconcile({
      deployments: [deployment({ replicas: 3 })],
      machines: fleet('down', 'stale', 'down', 'ready', 'ready'),
      assignments: [asg('a1', 'm1', { available: false }), asg('a4', 'm4')],
    });
    expect(actions).toEqual([
      { type: 'assign', deploymentId: 'dep_a', machineId: 'm5' },
      {
        type: 'pending',
        deploymentId: 'dep_a',
        missing: 1,
        reason: 'replacement paused: 3 of 5 machines are silent; likely a partition, not failures',
        rejected: [],
      },
    ]);
  });

  it('exactly half silent is not a partition at 0.5; the fraction is configurable', () => {
    const input = {
      deployments: [deployment({ replicas: 2 })],
      machines: fleet('down', 'stale', 'ready', 'ready'),
      assignments: [asg('a1', 'm1', { available: false }), asg('a3', 'm3')],
    };
    expect(reconcile(input)).toEqual([{ type: 'assign', deploymentId: 'dep_a', machineId: 'm4' }]);
    expect(reconcile({ ...input, replacementPauseFraction: 0.4 })).toEqual([
      {
        type: 'pending',
        deploymentId: 'dep_a',
        missing: 1,
        reason: 'replacement paused: 2 of 4 machines are silent; likely a partition, not failures',
        rejected: [],
      },
    ]);
  });

  it('the pause merges with a placement that fails for another reason into one report', () => {
    const machines = fleet('down', 'down', 'ready').map((m) => (m.id === 'm3' ? { ...m, cordoned: true } : m));
    const actions = reconcile({ deployments: [deployment({ replicas: 2 })], machines, assignments: [asg('a1', 'm1', { available: false })] });
    expect(actions).toEqual([
      {
        type: 'pending',
        deploymentId: 'dep_a',
        missing: 2,
        reason: 'replacement paused: 2 of 3 machines are silent; likely a partition, not failures',
        rejected: [
          { machineId: 'm1', reason: 'machine is down' },
          { machineId: 'm2', reason: 'machine is down' },
          { machineId: 'm3', reason: 'machine is cordoned' },
        ],
      },
    ]);
  });

  it('replacementPause: at least 2 silent, more than the fraction of enrolled machines (revoked and pending ones do not count)', () => {
    const pause = (fraction: number, ...liveness: MachineLiveness[]) =>
      replacementPause(
        liveness.map((l) => ({ liveness: l })),
        fraction,
      );
    expect(pause(0.5, 'down')).toBeNull();
    expect(pause(0.5, 'down', 'ready')).toBeNull();
    expect(pause(0.5, 'down', 'stale')).toBe('replacement paused: 2 of 2 machines are silent; likely a partition, not failures');
    expect(pause(0.5, 'down', 'stale', 'ready', 'ready')).toBeNull();
    expect(pause(0.5, 'down', 'stale', 'ready', 'revoked', 'pending', 'revoked')).toBe(
      'replacement paused: 2 of 3 machines are silent; likely a partition, not failures',
    );
    expect(pause(0, 'down', 'stale', 'ready', 'ready', 'ready')).toBe('replacement paused: 2 of 5 machines are silent; likely a partition, not failures');
    expect(pause(1, 'down', 'stale')).toBeNull();
    expect(pause(0.5, 'ready', 'ready')).toBeNull();
    expect(pause(0.5)).toBeNull();
  });
});
