import type { InferenceError } from './result.js';

/** How one attempt ended before a first body byte reached the client, or why no attempt could be made. */
export type AttemptOutcome =
  /** No routable replica is left to try (none at all, or every one was tried). */
  | { kind: 'no_replica' }
  /** The invoke could not be sent to the replica's node. */
  | { kind: 'dispatch_failed'; message: string }
  /** The node did not show it got the invoke within the ack timeout. */
  | { kind: 'node_timeout' }
  /** The runtime answered with a 5xx head. */
  | { kind: 'runtime_status'; status: number }
  /** An error frame from the node, or the node lost, before the first body byte. */
  | { kind: 'error'; code: string; message: string }
  /** The deadline passed (queued for a slot, waiting for the runtime, or held for a replica). */
  | { kind: 'deadline' }
  /** The client went away or the workload was cancelled. */
  | { kind: 'cancelled' };

export interface AttemptFailure {
  code: string;
  message: string;
}

export interface RetryState {
  /** The deployment's name, for the messages. */
  deployment: string;
  /** Failed attempts before this one that count against `maxAttempts`. */
  failures: number;
  maxAttempts: number;
  /** Replicas of the deployment on their way to serving: with some, a request that finds none to try waits for one. */
  startingReplicas: number;
  /** Why the last replica that failed did; null while none has. */
  lastFailure: AttemptFailure | null;
}

export type RetryDecision =
  /**
   * Try another replica. `failure` is this attempt's, to count and to remember; null when the replica refused
   * the work without running it (it is draining), which costs no attempt.
   */
  | { next: 'retry'; failure: AttemptFailure | null }
  /** No replica to try now but some are coming (starting, or rolling): hold until routing has one. */
  | { next: 'wait' }
  | { next: 'stop'; error: InferenceError };

/** An agent refuses new work on a replica it is draining: the work never started, so another replica takes it. */
export const REPLICA_DRAINING = 'replica_draining';

const DEADLINE: InferenceError = { kind: 'deadline', code: 'deadline_exceeded', message: 'the deadline passed before the request could be served' };
const CANCELLED: InferenceError = { kind: 'cancelled', code: 'cancelled', message: 'the request was cancelled' };

/**
 * Decides what follows an attempt that sent the client nothing yet (docs/design.md section 5, "Retry"): another
 * replica, a wait for one, or the error that ends the request. Pure: the caller counts and remembers.
 */
export function decideRetry(outcome: AttemptOutcome, state: RetryState): RetryDecision {
  switch (outcome.kind) {
    case 'deadline':
      return { next: 'stop', error: DEADLINE };
    case 'cancelled':
      return { next: 'stop', error: CANCELLED };
    case 'no_replica':
      // Running out of replicas to try must not hide why the ones tried failed.
      if (state.lastFailure) return { next: 'stop', error: everyReplicaFailed(state.lastFailure) };
      if (state.startingReplicas > 0) return { next: 'wait' };
      return {
        next: 'stop',
        error: { kind: 'unavailable', code: 'no_replica_available', message: `no routable replica of ${state.deployment}; retry later`, retryAfterS: 1 },
      };
    case 'dispatch_failed':
      return failed({ code: 'dispatch_failed', message: outcome.message }, state);
    case 'node_timeout':
      return failed({ code: 'node_timeout', message: 'the node did not answer in time' }, state);
    case 'runtime_status':
      return failed({ code: 'runtime_error', message: `runtime answered ${outcome.status}` }, state);
    case 'error':
      // The node or the runtime stopped for the request's own deadline or cancellation: another replica would too.
      if (outcome.code === 'deadline_exceeded') return { next: 'stop', error: DEADLINE };
      if (outcome.code === 'cancelled') return { next: 'stop', error: CANCELLED };
      if (outcome.code === REPLICA_DRAINING) return { next: 'retry', failure: null };
      return failed({ code: outcome.code, message: outcome.message }, state);
  }
}

function failed(failure: AttemptFailure, state: RetryState): RetryDecision {
  if (state.failures + 1 >= state.maxAttempts) return { next: 'stop', error: everyReplicaFailed(failure) };
  return { next: 'retry', failure };
}

function everyReplicaFailed(failure: AttemptFailure): InferenceError {
  return { kind: 'bad_gateway', code: failure.code, message: `the request failed on every replica tried: ${failure.message}` };
}
