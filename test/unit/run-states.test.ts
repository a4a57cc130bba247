import { describe, expect, it } from 'vitest';
import { RUN_STATES, deriveRunState, machineAnswered, runTransition, workerTransition, type RunState } from '../../functions/core/runs/states.js';

const moves = (origin: 'agent' | 'controller') =>
  RUN_STATES.flatMap((from) => RUN_STATES.filter((to) => 'event' in workerTransition('w', from, to, '', origin)).map((to) => `${from}>${to}`));

describe('a worker state machine', () => {
  it('lets its agent report the way through preparing, pulling, running and its exit, and what a returning machine finds', () => {
    expect(moves('agent')).toEqual([
      'pending>preparing',
      'preparing>pulling',
      'preparing>ready-to-start',
      'preparing>failed',
      'pulling>ready-to-start',
      'pulling>failed',
      'ready-to-start>failed',
      'starting>running',
      'starting>completed',
      'starting>failed',
      'running>completed',
      'running>failed',
      ...['stale', 'down'].flatMap((from) =>
        ['preparing', 'pulling', 'ready-to-start', 'starting', 'running', 'completed', 'failed'].map((to) => `${from}>${to}`),
      ),
    ]);
  });

  it('lets the controller start, lose sight, declare down, send back to waiting and fail', () => {
    expect(moves('controller')).toEqual([
      'pending>failed',
      'pending>stale',
      'preparing>pending',
      'preparing>failed',
      'preparing>stale',
      'pulling>pending',
      'pulling>failed',
      'pulling>stale',
      'ready-to-start>pending',
      'ready-to-start>starting',
      'ready-to-start>failed',
      'ready-to-start>stale',
      'starting>pending',
      'starting>failed',
      'starting>stale',
      'running>pending',
      'running>failed',
      'running>stale',
      'failed>pending',
      'stale>pending',
      'stale>failed',
      'stale>down',
      'down>pending',
      'down>failed',
    ]);
  });

  it('gives each move as an event with its reason and origin, and says why a move is refused', () => {
    expect(workerTransition('r-0', 'ready-to-start', 'starting', 'gang assembled', 'controller')).toEqual({
      event: { subject: 'worker', id: 'r-0', from: 'ready-to-start', to: 'starting', reason: 'gang assembled', origin: 'controller' },
    });
    expect(workerTransition('r-0', 'ready-to-start', 'starting', '', 'agent')).toEqual({
      refused: 'worker r-0: the agent does not move a worker from ready-to-start to starting',
    });
    expect(workerTransition('r-0', 'starting', 'running', '', 'controller')).toEqual({
      refused: 'worker r-0: the controller does not move a worker from starting to running',
    });
    expect(workerTransition('r-0', 'completed', 'pending', '', 'controller')).toEqual({ refused: 'worker r-0: completed is final' });
  });

  it('re-adopts a worker its returning machine still runs, and fails one it has not: process not found', () => {
    expect(machineAnswered('r-1', 'stale', 'running')).toEqual({
      event: { subject: 'worker', id: 'r-1', from: 'stale', to: 'running', reason: 're-adopted: its machine reports it running', origin: 'agent' },
    });
    expect(machineAnswered('r-1', 'down', null)).toEqual({
      event: { subject: 'worker', id: 'r-1', from: 'down', to: 'failed', reason: 'process not found', origin: 'agent' },
    });
    expect(machineAnswered('r-1', 'stale', 'pending')).toHaveProperty('refused');
  });
});

describe('a run state', () => {
  const of = (...states: RunState[]) => deriveRunState(states.map((state, i) => ({ name: `r-${i}`, state })));

  it('follows its least advanced worker', () => {
    expect(of('running', 'pulling', 'ready-to-start')).toEqual({ state: 'pulling', reason: '1 of 3 workers pulling' });
    expect(of('ready-to-start', 'ready-to-start')).toEqual({ state: 'ready-to-start', reason: '2 of 2 workers ready-to-start' });
    expect(of('running', 'starting', 'running')).toEqual({ state: 'starting', reason: '1 of 3 workers starting' });
    // A worker waiting for its agent or its restart counts as preparing; one that completed as running.
    expect(of('running', 'pending')).toEqual({ state: 'preparing', reason: '1 of 2 workers preparing' });
    expect(of('running', 'failed').state).toBe('preparing');
    expect(of('running', 'completed')).toEqual({ state: 'running', reason: '1 of 2 workers running' });
  });

  it('completes when every worker exited 0', () => {
    expect(of('completed', 'completed')).toEqual({ state: 'completed', reason: 'every worker exited 0' });
  });

  it('is down while a worker machine is down, else stale while sight of one is lost', () => {
    expect(of('running', 'stale', 'down')).toEqual({ state: 'down', reason: "worker r-2's machine is down" });
    expect(of('running', 'stale', 'completed')).toEqual({ state: 'stale', reason: "sight of worker r-1's machine is lost" });
  });

  it('moves by the controller in and out of the queue and to failed, by its workers otherwise', () => {
    expect(runTransition('run', 'pending', 'preparing', 'admitted: 4 workers on 1 machine', 'controller')).toEqual({
      event: { subject: 'run', id: 'run', from: 'pending', to: 'preparing', reason: 'admitted: 4 workers on 1 machine', origin: 'controller' },
    });
    expect(runTransition('run', 'pulling', 'pending', 'gang did not assemble', 'controller')).toHaveProperty('event');
    expect(runTransition('run', 'running', 'failed', 'restart limit 3 reached', 'controller')).toHaveProperty('event');
    expect(runTransition('run', 'running', 'completed', 'every worker exited 0', 'workers')).toHaveProperty('event');
    expect(runTransition('run', 'running', 'stale', '', 'workers')).toHaveProperty('event');
    expect(runTransition('run', 'stale', 'running', '', 'workers')).toHaveProperty('event');
    expect(runTransition('run', 'pending', 'running', '', 'workers')).toEqual({ refused: 'run run: its workers do not move a run from pending to running' });
    expect(runTransition('run', 'running', 'pending', '', 'workers')).toHaveProperty('refused');
    expect(runTransition('run', 'running', 'failed', '', 'workers')).toHaveProperty('refused');
    expect(runTransition('run', 'pulling', 'running', '', 'controller')).toEqual({
      refused: 'run run: the controller does not move a run from pulling to running',
    });
    expect(runTransition('run', 'completed', 'pending', '', 'controller')).toEqual({ refused: 'run run: completed is final' });
    expect(runTransition('run', 'running', 'running', '', 'workers')).toEqual({ refused: 'run run: already running' });
  });
});
