import { describe, expect, it } from 'vitest';
import { decideRetry, REPLICA_DRAINING, type AttemptOutcome, type RetryState } from '../../functions/dataplane/retry.js';

const state = (over: Partial<RetryState> = {}): RetryState => ({
  deployment: 'chat',
  failures: 0,
  maxAttempts: 3,
  startingReplicas: 1,
  lastFailure: null,
  ...over,
});

/** Every way a replica can fail before the first byte, with the failure it is remembered as. */
const replicaFailures: Array<[string, AttemptOutcome, { code: string; message: string }]> = [
  ['dispatch failed', { kind: 'dispatch_failed', message: 'stream gone' }, { code: 'dispatch_failed', message: 'stream gone' }],
  ['node timeout before ack', { kind: 'node_timeout' }, { code: 'node_timeout', message: 'the node did not answer in time' }],
  ['runtime 5xx head', { kind: 'runtime_status', status: 503 }, { code: 'runtime_error', message: 'runtime answered 503' }],
  ['node lost', { kind: 'error', code: 'node_lost', message: 'the node disconnected' }, { code: 'node_lost', message: 'the node disconnected' }],
  [
    'error frame before the head',
    { kind: 'error', code: 'runtime_unreachable', message: 'the runtime did not answer' },
    { code: 'runtime_unreachable', message: 'the runtime did not answer' },
  ],
  [
    'error frame before the first body byte',
    { kind: 'error', code: 'runtime_stream_broken', message: 'broke' },
    { code: 'runtime_stream_broken', message: 'broke' },
  ],
];

describe('decideRetry', () => {
  describe.each(replicaFailures)('a replica failure (%s)', (_name, outcome, failure) => {
    it('is retried on another replica while attempts are left, and remembered', () => {
      expect(decideRetry(outcome, state())).toEqual({ next: 'retry', failure });
      expect(decideRetry(outcome, state({ failures: 1 }))).toEqual({ next: 'retry', failure });
    });

    it('ends the request with 502-class bad_gateway on the last attempt, naming its own code', () => {
      expect(decideRetry(outcome, state({ failures: 2 }))).toEqual({
        next: 'stop',
        error: { kind: 'bad_gateway', code: failure.code, message: `the request failed on every replica tried: ${failure.message}` },
      });
      expect(decideRetry(outcome, state({ failures: 0, maxAttempts: 1 })).next).toBe('stop');
    });

    it('is retried whether or not the deployment asks for replicas (a failure is no reason to wait)', () => {
      expect(decideRetry(outcome, state({ startingReplicas: 0 })).next).toBe('retry');
    });
  });

  describe('a draining replica refusing the work (error frame replica_draining)', () => {
    const refusal: AttemptOutcome = { kind: 'error', code: REPLICA_DRAINING, message: 'the replica is draining' };

    it('is retried on another replica', () => {
      expect(decideRetry(refusal, state())).toEqual({ next: 'retry', failure: null });
    });

    it('costs no attempt: retried even when the attempts are spent', () => {
      expect(decideRetry(refusal, state({ failures: 2 }))).toEqual({ next: 'retry', failure: null });
      expect(decideRetry(refusal, state({ failures: 0, maxAttempts: 1 }))).toEqual({ next: 'retry', failure: null });
    });
  });

  describe('no replica left to try', () => {
    const none: AttemptOutcome = { kind: 'no_replica' };

    it('waits for one when none failed and the deployment asks for replicas (starting, or rolling)', () => {
      expect(decideRetry(none, state({ startingReplicas: 1 }))).toEqual({ next: 'wait' });
      expect(decideRetry(none, state({ startingReplicas: 4 }))).toEqual({ next: 'wait' });
    });

    it('answers unavailable at once, with Retry-After, when the deployment asks for none', () => {
      expect(decideRetry(none, state({ startingReplicas: 0 }))).toEqual({
        next: 'stop',
        error: { kind: 'unavailable', code: 'no_replica_available', message: 'no routable replica of chat; retry later', retryAfterS: 1 },
      });
    });

    it('after replicas failed, ends with why the last one failed, not with "no replica", and does not wait', () => {
      for (const startingReplicas of [0, 1]) {
        expect(decideRetry(none, state({ startingReplicas, failures: 1, lastFailure: { code: 'node_lost', message: 'gone' } }))).toEqual({
          next: 'stop',
          error: { kind: 'bad_gateway', code: 'node_lost', message: 'the request failed on every replica tried: gone' },
        });
      }
    });
  });

  describe('the request itself ends, whatever is left', () => {
    const deadline = { kind: 'deadline', code: 'deadline_exceeded', message: 'the deadline passed before the request could be served' };
    const cancelled = { kind: 'cancelled', code: 'cancelled', message: 'the request was cancelled' };
    const cases: Array<[string, AttemptOutcome, object]> = [
      ['its deadline passed', { kind: 'deadline' }, deadline],
      ['the node or the runtime stopped at the deadline (error frame)', { kind: 'error', code: 'deadline_exceeded', message: 'late' }, deadline],
      ['it was cancelled', { kind: 'cancelled' }, cancelled],
      ['the node stopped it as cancelled (error frame)', { kind: 'error', code: 'cancelled', message: 'client disconnected' }, cancelled],
    ];
    it.each(cases)('%s: stop, never retried', (_name, outcome, error) => {
      for (const over of [{}, { failures: 2 }, { lastFailure: { code: 'node_lost', message: 'gone' } }, { startingReplicas: 0 }]) {
        expect(decideRetry(outcome, state(over))).toEqual({ next: 'stop', error });
      }
    });
  });
});
