import { describe, expect, it } from 'vitest';
import { startDecision, type StartingWorker } from '../../functions/core/runs/gang.js';
import type { RunState } from '../../functions/core/runs/states.js';

const MIN = 60_000;
const workers = (...states: Array<RunState | 'unplaced'>): StartingWorker[] =>
  states.map((state, rank) => ({
    name: `r-${rank}`,
    machineId: state === 'unplaced' ? null : `m${rank % 2}`,
    state: state === 'unplaced' ? 'pending' : state,
  }));
const gang = { timeoutMs: 10 * MIN };

describe('starting a run', () => {
  it('starts each worker of a run that is no gang as soon as it is ready', () => {
    expect(startDecision({ workers: workers('ready-to-start', 'pulling', 'ready-to-start'), gang: null, assemblingSince: 0, now: 0 })).toEqual({
      action: 'start',
      workers: ['r-0', 'r-2'],
      reason: 'ready to start',
    });
    expect(startDecision({ workers: workers('running', 'pulling'), gang: null, assemblingSince: 0, now: 99 * MIN })).toEqual({
      action: 'wait',
      reason: 'no worker ready to start',
    });
  });

  it('starts a gang only when every worker is placed and ready to start, all together', () => {
    expect(startDecision({ workers: workers('ready-to-start', 'ready-to-start', 'ready-to-start'), gang, assemblingSince: 0, now: MIN })).toEqual({
      action: 'start',
      workers: ['r-0', 'r-1', 'r-2'],
      reason: 'gang assembled: all 3 workers ready to start',
    });
    expect(startDecision({ workers: workers('ready-to-start', 'pulling', 'ready-to-start', 'unplaced'), gang, assemblingSince: 0, now: MIN })).toEqual({
      action: 'wait',
      reason: 'gang assembling: 2 of 4 workers not ready to start (r-1 pulling, r-3 unplaced)',
    });
  });

  it('starts the rest of a gang a restarted controller finds partly started, and nothing twice', () => {
    expect(startDecision({ workers: workers('starting', 'ready-to-start', 'running'), gang, assemblingSince: 0, now: MIN })).toEqual({
      action: 'start',
      workers: ['r-1'],
      reason: 'gang assembled: all 3 workers ready to start',
    });
    expect(startDecision({ workers: workers('starting', 'running', 'completed'), gang, assemblingSince: 0, now: 99 * MIN })).toEqual({
      action: 'wait',
      reason: 'gang started',
    });
  });

  it('releases a gang not assembled within its timeout, naming the workers that held it up', () => {
    const lagging = workers('ready-to-start', 'pulling', 'preparing', 'stale', 'unplaced', 'pending', 'down', 'ready-to-start');
    expect(startDecision({ workers: lagging, gang, assemblingSince: 5 * MIN, now: 15 * MIN - 1 }).action).toBe('wait');
    expect(startDecision({ workers: lagging, gang, assemblingSince: 5 * MIN, now: 15 * MIN })).toEqual({
      action: 'release',
      reason:
        'gang did not assemble within 10 min: 6 of 8 workers not ready to start (r-1 pulling, r-2 preparing, r-3 stale, r-4 unplaced, r-5 pending and 1 more)',
    });
    expect(startDecision({ workers: workers('pulling'), gang: { timeoutMs: 3_600_000 }, assemblingSince: 0, now: 3_600_000 }).reason).toMatch(
      /^gang did not assemble within 1 h/,
    );
    expect(startDecision({ workers: workers('pulling'), gang: { timeoutMs: 90_000 }, assemblingSince: 0, now: 90_000 }).reason).toMatch(
      /^gang did not assemble within 90 s/,
    );
  });

  it('counts a failed worker as holding the gang up: the failure policy restarts the gang', () => {
    expect(startDecision({ workers: workers('ready-to-start', 'failed'), gang, assemblingSince: 0, now: MIN })).toEqual({
      action: 'wait',
      reason: 'gang assembling: 1 of 2 workers not ready to start (r-1 failed)',
    });
  });
});
