import { describe, expect, it } from 'vitest';
import { MACHINE_DOWN, sightMoves } from '../../functions/core/runs/sight.js';
import { RUN_STATES, type RunState } from '../../functions/core/runs/states.js';
import { localRankOn } from '../../functions/core/runs/env.js';
import { MachineLiveness } from '../../shared/contracts/machine.js';

const path = (state: RunState, liveness: MachineLiveness | null, paused: string | null = null) =>
  sightMoves({ worker: 'r-1', state, machine: liveness === null ? null : { name: 'gpu-a', liveness }, paused })
    .map((e) => e.to)
    .join('>');

const PLACED: RunState[] = ['pending', 'preparing', 'pulling', 'ready-to-start', 'starting', 'running'];

describe('a worker when sight of its machine is lost', () => {
  it('does not move while its machine reports, whatever its state: its agent re-adopts it or reports it gone', () => {
    for (const state of RUN_STATES) {
      expect(path(state, 'ready')).toBe('');
      expect(path(state, 'pending')).toBe('');
    }
  });

  it('never moves a final worker, nor one failed waiting for its restart', () => {
    for (const liveness of MachineLiveness.options) {
      expect(path('completed', liveness)).toBe('');
      expect(path('failed', liveness, 'paused')).toBe('');
      expect(path('failed', liveness)).toBe('');
    }
  });

  it('becomes stale on a stale machine, keeping its reservation, and a lost one stays as it is', () => {
    for (const state of PLACED) expect(path(state, 'stale')).toBe('stale');
    expect(path('stale', 'stale')).toBe('');
    expect(path('down', 'stale')).toBe('');
  });

  it('becomes down on a down machine and fails there, as its replicas are replaced, unless replacement is paused', () => {
    for (const state of PLACED) {
      expect(path(state, 'down')).toBe('stale>down>failed');
      expect(path(state, 'down', 'replacement paused: 3 of 4 machines are silent')).toBe('stale>down');
    }
    expect(path('stale', 'down')).toBe('down>failed');
    expect(path('stale', 'down', 'paused')).toBe('down');
    expect(path('down', 'down')).toBe('failed');
    expect(path('down', 'down', 'paused')).toBe('');
  });

  it('fails at once, paused or not, on a revoked machine or one that is gone: it will never answer', () => {
    for (const liveness of ['revoked', null] as const) {
      for (const state of PLACED) expect(path(state, liveness, 'paused')).toBe('stale>down>failed');
      expect(path('stale', liveness)).toBe('down>failed');
      expect(path('down', liveness)).toBe('failed');
    }
  });

  it('says why at each step, as the controller, and fails with the message the failure policy reads as machine-down', () => {
    const events = sightMoves({ worker: 'r-1', state: 'running', machine: { name: 'gpu-a', liveness: 'down' }, paused: null });
    expect(events).toEqual([
      { subject: 'worker', id: 'r-1', from: 'running', to: 'stale', reason: 'sight of machine gpu-a is lost', origin: 'controller' },
      { subject: 'worker', id: 'r-1', from: 'stale', to: 'down', reason: 'machine gpu-a is declared down', origin: 'controller' },
      {
        subject: 'worker',
        id: 'r-1',
        from: 'down',
        to: 'failed',
        reason: `${MACHINE_DOWN}: machine gpu-a is down and its replicas are replaced`,
        origin: 'controller',
      },
    ]);
    expect(sightMoves({ worker: 'r-1', state: 'down', machine: null, paused: null })[0]!.reason).toBe(`${MACHINE_DOWN}: its machine is revoked`);
  });
});

describe('LOCAL_RANK of a worker placed again', () => {
  it('counts its run workers of lower rank on its new machine', () => {
    const workers = [
      { rank: 0, machineId: 'm1' },
      { rank: 1, machineId: 'm2' },
      { rank: 2, machineId: null },
      { rank: 3, machineId: 'm2' },
    ];
    expect(localRankOn('m2', 2, workers)).toBe(1);
    expect(localRankOn('m3', 2, workers)).toBe(0);
    expect(localRankOn('m1', 2, workers)).toBe(1);
  });
});
