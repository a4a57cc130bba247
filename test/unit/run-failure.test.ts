import { describe, expect, it } from 'vitest';
import { backoffMs, decideFailure, type WorkerFailure } from '../../functions/core/runs/failure.js';
import { FailurePolicy } from '../../shared/contracts/run.js';

const policy = (action: FailurePolicy['action'], maxRestarts = 3) => FailurePolicy.parse({ action, maxRestarts, backoff: { initialMs: 1000, maxMs: 10_000 } });
const exited: WorkerFailure = { kind: 'exited', code: 137 };
const worker = (rank = 2, restarts = 0) => ({ name: `r-${rank}`, rank, restarts });

describe('back-off', () => {
  it('doubles from initialMs for each restart before, up to maxMs, and stays finite', () => {
    const backoff = { initialMs: 1000, maxMs: 10_000 };
    expect([0, 1, 2, 3, 4, 5].map((n) => backoffMs(backoff, n))).toEqual([1000, 2000, 4000, 8000, 10_000, 10_000]);
    expect(backoffMs({ initialMs: 3_600_000, maxMs: 3_600_000 }, 1_000_000)).toBe(3_600_000);
  });
});

describe('the failure policy', () => {
  it('fails the run under fail', () => {
    expect(decideFailure({ policy: policy('fail'), gang: false, worker: worker(), runRestarts: 0, failure: exited })).toEqual({
      action: 'fail-run',
      reason: 'worker r-2 exited with code 137; failure policy: fail',
    });
  });

  it('restarts the worker in place under restart-worker, counting its own restarts, with back-off', () => {
    expect(decideFailure({ policy: policy('restart-worker'), gang: false, worker: worker(2, 1), runRestarts: 5, failure: exited })).toEqual({
      action: 'restart-worker',
      worker: 'r-2',
      restart: 2,
      delayMs: 2000,
      elsewhere: false,
      reason: 'worker r-2 exited with code 137; restarting it (restart 2 of 3) in 2000 ms',
    });
    expect(
      decideFailure({ policy: policy('restart-worker'), gang: false, worker: worker(2, 0), runRestarts: 0, failure: { kind: 'process-not-found' } }),
    ).toMatchObject({ action: 'restart-worker', elsewhere: false, reason: 'worker r-2: process not found; restarting it (restart 1 of 3) in 1000 ms' });
  });

  it('places the worker elsewhere when its machine is down, unless it is rank 0, whose address every worker has', () => {
    expect(
      decideFailure({ policy: policy('restart-worker'), gang: false, worker: worker(2), runRestarts: 0, failure: { kind: 'machine-down' } }),
    ).toMatchObject({
      action: 'restart-worker',
      elsewhere: true,
      reason: 'worker r-2: its machine is down; restarting it elsewhere (restart 1 of 3) in 1000 ms',
    });
    expect(decideFailure({ policy: policy('restart-worker'), gang: false, worker: worker(0), runRestarts: 1, failure: { kind: 'machine-down' } })).toEqual({
      action: 'restart-run',
      restart: 2,
      delayMs: 2000,
      reason: 'worker r-0: its machine is down; restarting the run (rank 0 moves: every worker needs its new address) (restart 2 of 3) in 2000 ms',
    });
    // Rank 0 restarting in place keeps its address.
    expect(decideFailure({ policy: policy('restart-worker'), gang: false, worker: worker(0), runRestarts: 0, failure: exited }).action).toBe('restart-worker');
  });

  it('restarts the whole run under restart-run, counting the run restarts', () => {
    expect(
      decideFailure({
        policy: policy('restart-run'),
        gang: false,
        worker: worker(1, 2),
        runRestarts: 0,
        failure: { kind: 'no-exit-code', message: 'pull failed: 404' },
      }),
    ).toEqual({
      action: 'restart-run',
      restart: 1,
      delayMs: 1000,
      reason: 'worker r-1 failed: pull failed: 404; restarting the run (restart 1 of 3) in 1000 ms',
    });
  });

  it('restarts a gang as a whole whatever the policy says of workers', () => {
    expect(decideFailure({ policy: policy('restart-worker'), gang: true, worker: worker(3, 0), runRestarts: 2, failure: exited })).toEqual({
      action: 'restart-run',
      restart: 3,
      delayMs: 4000,
      reason: 'worker r-3 exited with code 137; restarting the run (a gang restarts as a whole) (restart 3 of 3) in 4000 ms',
    });
    expect(decideFailure({ policy: policy('fail'), gang: true, worker: worker(), runRestarts: 0, failure: exited }).action).toBe('fail-run');
  });

  it('fails the run past the restart limit, saying so', () => {
    expect(decideFailure({ policy: policy('restart-worker', 2), gang: false, worker: worker(2, 2), runRestarts: 0, failure: exited })).toEqual({
      action: 'fail-run',
      reason: 'worker r-2 exited with code 137; restart limit 2 reached',
    });
    expect(decideFailure({ policy: policy('restart-run', 0), gang: false, worker: worker(), runRestarts: 0, failure: { kind: 'machine-down' } })).toEqual({
      action: 'fail-run',
      reason: 'worker r-2: its machine is down; restart limit 0 reached',
    });
    expect(decideFailure({ policy: policy('restart-worker', 1), gang: true, worker: worker(2, 0), runRestarts: 1, failure: exited }).action).toBe('fail-run');
  });
});
