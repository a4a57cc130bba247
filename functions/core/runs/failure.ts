import type { FailurePolicy } from '../../../shared/contracts/run.js';

/** How a worker failed. */
export type WorkerFailure =
  /** Its process exited with a code other than 0. */
  | { kind: 'exited'; code: number }
  /**
   * It failed without an exit code, as its agent's message says: it never ran (preparing, pulling or starting
   * failed, or the node's policy refused it), or its process ended by a signal. The report does not say which.
   */
  | { kind: 'no-exit-code'; message: string }
  /** Its machine came back after sight was lost and has no such process. */
  | { kind: 'process-not-found' }
  /** Its machine was declared down. */
  | { kind: 'machine-down' };

export type FailureDecision =
  /**
   * Start the worker again after `delayMs`: on its machine, or, when `elsewhere`, placed on another (its machine is
   * down: it takes nothing new until it reports again, and its desired state then no longer has the worker).
   */
  | { action: 'restart-worker'; worker: string; restart: number; delayMs: number; elsewhere: boolean; reason: string }
  /** Stop every worker, release them, and put the run back in the queue, not to be placed before `delayMs` from now. */
  | { action: 'restart-run'; restart: number; delayMs: number; reason: string }
  /** Stop every other worker and fail the run. */
  | { action: 'fail-run'; reason: string };

/** The wait before restart number `restartsSoFar + 1`: `initialMs`, doubled for each restart before it, at most `maxMs`. */
export function backoffMs(backoff: FailurePolicy['backoff'], restartsSoFar: number): number {
  // 2^31 already passes any bound the contract allows; capping the exponent keeps the arithmetic finite.
  return Math.min(backoff.maxMs, backoff.initialMs * 2 ** Math.min(restartsSoFar, 31));
}

function failureText(worker: string, failure: WorkerFailure): string {
  switch (failure.kind) {
    case 'exited':
      return `worker ${worker} exited with code ${failure.code}`;
    case 'no-exit-code':
      return `worker ${worker} failed: ${failure.message}`;
    case 'process-not-found':
      return `worker ${worker}: process not found`;
    case 'machine-down':
      return `worker ${worker}: its machine is down`;
  }
}

/**
 * What a worker's failure leads to, by its run's failure policy:
 * - `fail`: the run fails.
 * - `restart-worker`: that worker restarts (counted per worker), on its machine, or elsewhere when its machine is
 *   down; a gang restarts as a whole instead, and so does a run whose rank 0 must move (every worker's MASTER_ADDR
 *   would change).
 * - `restart-run`: the whole run restarts (counted per run) through the queue.
 * Past `maxRestarts` the run fails, saying so. Each restart waits `backoffMs`. A worker whose machine goes down
 * follows the same policy once the machine is declared down (`machine-down`); until then it is only stale.
 */
export function decideFailure(input: {
  policy: FailurePolicy;
  gang: boolean;
  worker: { name: string; rank: number; restarts: number };
  runRestarts: number;
  failure: WorkerFailure;
}): FailureDecision {
  const { policy, worker, failure } = input;
  const what = failureText(worker.name, failure);
  if (policy.action === 'fail') return { action: 'fail-run', reason: `${what}; failure policy: fail` };
  const elsewhere = failure.kind === 'machine-down';
  const whole = policy.action === 'restart-run' || input.gang || (elsewhere && worker.rank === 0);
  const restarts = whole ? input.runRestarts : worker.restarts;
  if (restarts >= policy.maxRestarts) {
    return { action: 'fail-run', reason: `${what}; restart limit ${policy.maxRestarts} reached` };
  }
  const delayMs = backoffMs(policy.backoff, restarts);
  if (!whole) {
    const where = elsewhere ? ' elsewhere' : '';
    return {
      action: 'restart-worker',
      worker: worker.name,
      restart: restarts + 1,
      delayMs,
      elsewhere,
      reason: `${what}; restarting it${where} (restart ${restarts + 1} of ${policy.maxRestarts}) in ${delayMs} ms`,
    };
  }
  const why = policy.action === 'restart-run' ? '' : input.gang ? ' (a gang restarts as a whole)' : ' (rank 0 moves: every worker needs its new address)';
  return {
    action: 'restart-run',
    restart: restarts + 1,
    delayMs,
    reason: `${what}; restarting the run${why} (restart ${restarts + 1} of ${policy.maxRestarts}) in ${delayMs} ms`,
  };
}
