import { afterEach, describe, expect, it, vi } from 'vitest';
import type { RowRetry } from '../../shared/batch/job.js';
import { RETRYABLE_STATUSES, retryDelay } from '../../shared/batch/retry.js';

const policy: RowRetry = { maxAttempts: 5, baseMs: 1000, maxMs: 30_000 };

describe('retryDelay', () => {
  afterEach(() => vi.restoreAllMocks());

  it.each([408, 429, 500, 502, 503, 504])('retries status %i', (status) => {
    expect(RETRYABLE_STATUSES.has(status)).toBe(true);
    expect(retryDelay({ status, attempt: 1, rowIndex: 0, policy })).toMatchObject({ retry: true });
  });

  it.each([200, 201, 400, 401, 403, 404, 409, 413, 422, 499, 501, 505])('does not retry status %i', (status) => {
    expect(retryDelay({ status, attempt: 1, rowIndex: 0, policy })).toEqual({ retry: false });
  });

  it('retries a network error', () => {
    expect(retryDelay({ networkError: true, attempt: 1, rowIndex: 0, policy })).toMatchObject({ retry: true });
  });

  it('stops at maxAttempts attempts in all', () => {
    expect(retryDelay({ status: 503, attempt: 4, rowIndex: 0, policy })).toMatchObject({ retry: true });
    expect(retryDelay({ status: 503, attempt: 5, rowIndex: 0, policy })).toEqual({ retry: false });
    expect(retryDelay({ networkError: true, attempt: 5, rowIndex: 0, policy })).toEqual({ retry: false });
    expect(retryDelay({ status: 429, retryAfterS: 1, attempt: 5, rowIndex: 0, policy })).toEqual({ retry: false });
    expect(retryDelay({ status: 500, attempt: 1, rowIndex: 0, policy: { ...policy, maxAttempts: 1 } })).toEqual({ retry: false });
  });

  it('doubles the wait from baseMs up to maxMs, jittered over its upper half', () => {
    const wide: RowRetry = { maxAttempts: 100, baseMs: 1000, maxMs: 30_000 };
    const ceilings = [1000, 2000, 4000, 8000, 16_000, 30_000, 30_000];
    for (const [i, ceiling] of ceilings.entries()) {
      for (let rowIndex = 0; rowIndex < 200; rowIndex += 1) {
        const decision = retryDelay({ status: 503, attempt: i + 1, rowIndex, policy: wide });
        expect(decision.retry).toBe(true);
        if (!decision.retry) continue;
        expect(decision.delayMs).toBeGreaterThanOrEqual(ceiling / 2);
        expect(decision.delayMs).toBeLessThanOrEqual(ceiling);
        expect(Number.isInteger(decision.delayMs)).toBe(true);
      }
    }
    // Far past the cap, the doubling does not overflow.
    const late = retryDelay({ networkError: true, attempt: 99, rowIndex: 3, policy: wide });
    expect(late.retry && late.delayMs).toBeGreaterThanOrEqual(15_000);
    expect(late.retry && late.delayMs).toBeLessThanOrEqual(30_000);
  });

  it('waits the same for the same row and attempt, and spreads rows apart, without Math.random', () => {
    const random = vi.spyOn(Math, 'random');
    const delay = (rowIndex: number, attempt: number) => {
      const decision = retryDelay({ status: 429, attempt, rowIndex, policy: { maxAttempts: 10, baseMs: 1000, maxMs: 1_000_000 } });
      return decision.retry ? decision.delayMs : Number.NaN;
    };
    expect(delay(12_345, 3)).toBe(delay(12_345, 3));
    const delays = Array.from({ length: 10_000 }, (_, rowIndex) => delay(rowIndex, 4));
    // At attempt 4 the wait is in [4000, 8000]: spread over it, about evenly.
    expect(new Set(delays).size).toBeGreaterThan(3000);
    const mean = delays.reduce((a, b) => a + b, 0) / delays.length;
    expect(Math.abs(mean - 6000)).toBeLessThan(100);
    const lowHalf = delays.filter((d) => d < 6000).length;
    expect(Math.abs(lowHalf - 5000)).toBeLessThan(300);
    // Attempts of one row differ, so rows that failed together do not stay together.
    expect(new Set([1, 2, 3, 4, 5, 6].map((attempt) => delay(7, attempt) / 2 ** attempt)).size).toBe(6);
    // Rows far apart, beyond 32 bits, still get their own jitter.
    expect(delay(2 ** 40, 2)).not.toBe(delay(2 ** 40 + 2 ** 32, 2));
    expect(random).not.toHaveBeenCalled();
  });

  it('waits as Retry-After says, plus a jitter under baseMs, never over maxMs', () => {
    for (let rowIndex = 0; rowIndex < 100; rowIndex += 1) {
      const decision = retryDelay({ status: 429, retryAfterS: 3, attempt: 1, rowIndex, policy });
      expect(decision.retry).toBe(true);
      if (!decision.retry) continue;
      expect(decision.delayMs).toBeGreaterThanOrEqual(3000);
      expect(decision.delayMs).toBeLessThanOrEqual(4000);
    }
    // Longer than the back-off would be, and shorter: the server's word either way.
    const long = retryDelay({ status: 503, retryAfterS: 20, attempt: 1, rowIndex: 1, policy });
    expect(long.retry && long.delayMs).toBeGreaterThanOrEqual(20_000);
    expect(long.retry && long.delayMs).toBeLessThanOrEqual(21_000);
    const short = retryDelay({ status: 503, retryAfterS: 0, attempt: 4, rowIndex: 1, policy });
    expect(short.retry && short.delayMs).toBeLessThanOrEqual(1000);
    expect(retryDelay({ status: 429, retryAfterS: 3600, attempt: 1, rowIndex: 1, policy })).toEqual({ retry: true, delayMs: 30_000 });
    expect(retryDelay({ status: 429, retryAfterS: 0.5, attempt: 1, rowIndex: 1, policy })).toMatchObject({ retry: true });
  });

  it('ignores a Retry-After that is no number of seconds, and never retries a refusal for one', () => {
    const backoff = retryDelay({ status: 503, attempt: 2, rowIndex: 9, policy });
    for (const retryAfterS of [null, undefined, -1, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(retryDelay({ status: 503, retryAfterS, attempt: 2, rowIndex: 9, policy })).toEqual(backoff);
    }
    expect(retryDelay({ status: 400, retryAfterS: 1, attempt: 1, rowIndex: 0, policy })).toEqual({ retry: false });
  });
});
