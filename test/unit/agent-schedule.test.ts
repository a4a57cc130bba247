import { describe, expect, it } from 'vitest';
import { backoffDelayMs } from '../../agent/link/backoff.js';
import {
  afterReportFailure,
  FIRST_REPORT_SPREAD_MS,
  firstReportDelayMs,
  INTERVAL_JITTER,
  keepAliveDelayMs,
  RETRY_BASE_MS,
  RETRY_CAP_MS,
  retryDelayMs,
} from '../../agent/reporter/schedule.js';

/** The largest value Math.random can return. */
const ALMOST_ONE = 1 - Number.EPSILON;
const fixed = (value: number) => () => value;

/** A seeded generator (mulberry32): the spread tests see the same draws on every run. */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The largest share of `values` that falls into one of `slots` equal slots of [0, width). */
function busiestSlotShare(values: number[], width: number, slots: number): number {
  const counts = new Array<number>(slots).fill(0);
  for (const v of values) counts[Math.min(slots - 1, Math.floor(((v % width) / width) * slots))]! += 1;
  return Math.max(...counts) / values.length;
}

describe('keep-alive jitter', () => {
  it('stays within ±10 % of the interval, and is the interval at the middle of the draw', () => {
    expect(INTERVAL_JITTER).toBe(0.1);
    expect(keepAliveDelayMs(20_000, fixed(0))).toBe(18_000);
    expect(keepAliveDelayMs(20_000, fixed(0.5))).toBe(20_000);
    expect(keepAliveDelayMs(20_000, fixed(ALMOST_ONE))).toBe(22_000);
    for (const interval of [250, 1_000, 5_000, 20_000]) {
      for (let i = 0; i <= 100; i++) {
        const delay = keepAliveDelayMs(interval, fixed(Math.min(ALMOST_ONE, i / 100)));
        expect(delay).toBeGreaterThanOrEqual(Math.round(interval * 0.9));
        expect(delay).toBeLessThanOrEqual(Math.round(interval * 1.1));
      }
    }
  });

  it('keeps the mean interval, so the protocol keep-alive (at most every 20 s) holds on average', () => {
    const random = seeded(7);
    let total = 0;
    for (let i = 0; i < 10_000; i++) total += keepAliveDelayMs(20_000, random);
    expect(Math.abs(total / 10_000 - 20_000)).toBeLessThan(100);
  });

  it('spreads 1,000 agents that report in step: after ten intervals no 1 s slot holds more than 15 % of them (without jitter: all)', () => {
    const random = seeded(42);
    // Every agent starts at the same instant and skips the first-report spread: only the jitter separates them.
    const phases = Array.from({ length: 1_000 }, () => {
      let at = 0;
      for (let i = 0; i < 10; i++) at += keepAliveDelayMs(20_000, random);
      return at;
    });
    expect(busiestSlotShare(phases, 20_000, 20)).toBeLessThan(0.15);
  });
});

describe('first report after start', () => {
  it('waits a random part of 2 s, or of a quarter of a shorter interval', () => {
    expect(FIRST_REPORT_SPREAD_MS).toBe(2_000);
    expect(firstReportDelayMs(20_000, fixed(0))).toBe(0);
    expect(firstReportDelayMs(20_000, fixed(0.5))).toBe(1_000);
    expect(firstReportDelayMs(20_000, fixed(ALMOST_ONE))).toBe(1_999);
    expect(firstReportDelayMs(1_000, fixed(ALMOST_ONE))).toBe(249);
    expect(firstReportDelayMs(250, fixed(ALMOST_ONE))).toBe(62);
    for (const interval of [250, 5_000, 20_000]) {
      for (let i = 0; i <= 100; i++) {
        const delay = firstReportDelayMs(interval, fixed(Math.min(ALMOST_ONE, i / 100)));
        expect(delay).toBeGreaterThanOrEqual(0);
        expect(delay).toBeLessThan(Math.min(2_000, interval / 4));
      }
    }
  });

  it('spreads 1,000 agents started together over the window: no 100 ms slot gets more than 10 % of them', () => {
    const random = seeded(1);
    const delays = Array.from({ length: 1_000 }, () => firstReportDelayMs(20_000, random));
    expect(busiestSlotShare(delays, 2_000, 20)).toBeLessThan(0.1);
    expect(Math.max(...delays) - Math.min(...delays)).toBeGreaterThan(1_800);
  });
});

describe('what a failed report gets', () => {
  it.each([
    [0, 'network_error', 'retry'],
    [408, 'http_error', 'retry'],
    [429, 'http_error', 'retry'],
    [500, 'internal', 'retry'],
    [502, 'http_error', 'retry'],
    [503, 'store_unavailable', 'retry'],
    [504, 'http_error', 'retry'],
    [401, 'clock_skew', 'resync'],
    [401, 'invalid_machine_token', 'drop'],
    [401, 'machine_revoked', 'drop'],
    [401, 'credential_expired', 'drop'],
    [401, 'replayed_request', 'drop'],
    [400, 'validation_failed', 'drop'],
    [403, 'forbidden_machine', 'drop'],
    [404, 'not_found', 'drop'],
    [409, 'replayed_sequence', 'drop'],
    [413, 'payload_too_large', 'drop'],
    [307, 'redirect_refused', 'drop'],
    [200, 'invalid_response', 'drop'],
  ] as const)('HTTP %i %s: %s', (status, code, expected) => {
    expect(afterReportFailure({ status, code })).toBe(expected);
  });
});

describe('retry of a failed report', () => {
  const FAR = Number.POSITIVE_INFINITY;

  it('comes at once: the first within 200 ms, each ceiling doubling', () => {
    expect(RETRY_BASE_MS).toBe(200);
    for (let failures = 1; failures <= 5; failures++) {
      const ceiling = RETRY_BASE_MS * 2 ** (failures - 1);
      expect(retryDelayMs(failures, FAR, 20_000, fixed(0))).toBe(50);
      expect(retryDelayMs(failures, FAR, 20_000, fixed(ALMOST_ONE))).toBe(ceiling - 1);
      expect(retryDelayMs(failures, FAR, 20_000, fixed(0.5))).toBe(Math.max(50, ceiling / 2));
    }
  });

  it('is capped at 5 s, or at a quarter of a shorter interval', () => {
    expect(RETRY_CAP_MS).toBe(5_000);
    expect(retryDelayMs(30, FAR, 20_000, fixed(ALMOST_ONE))).toBe(4_999);
    expect(retryDelayMs(1_000, FAR, 20_000, fixed(ALMOST_ONE))).toBe(4_999);
    expect(retryDelayMs(30, FAR, 5_000, fixed(ALMOST_ONE))).toBe(1_249);
    expect(retryDelayMs(30, FAR, 250, fixed(ALMOST_ONE))).toBe(62);
    for (let failures = 1; failures <= 40; failures++) {
      for (const interval of [250, 1_000, 5_000, 20_000]) {
        const delay = retryDelayMs(failures, FAR, interval, fixed(ALMOST_ONE))!;
        expect(delay).toBeLessThan(Math.max(50, Math.min(5_000, interval / 4)));
        expect(delay).toBeGreaterThanOrEqual(50);
      }
    }
  });

  it('never spaces retries closer than 50 ms, even for an interval shorter than 200 ms', () => {
    expect(retryDelayMs(1, FAR, 100, fixed(0))).toBe(50);
    expect(retryDelayMs(1, FAR, 100, fixed(ALMOST_ONE))).toBe(50);
  });

  it('is given up when the next regular report would come first: that report supersedes it', () => {
    expect(retryDelayMs(1, 1_000, 20_000, fixed(ALMOST_ONE))).toBe(199);
    expect(retryDelayMs(1, 199, 20_000, fixed(ALMOST_ONE))).toBeNull();
    expect(retryDelayMs(1, 200, 20_000, fixed(ALMOST_ONE))).toBe(199);
    expect(retryDelayMs(1, 0, 20_000, fixed(0))).toBeNull();
    expect(retryDelayMs(1, -500, 20_000, fixed(0))).toBeNull();
  });

  it('reaches the control plane several times before the next keep-alive, with retries of 1,000 agents spread', () => {
    // A failure at the start of a 20 s interval: how many retries fit before the next regular report.
    const random = seeded(3);
    const counts = Array.from({ length: 1_000 }, () => {
      let elapsed = 0;
      let failures = 0;
      for (;;) {
        const delay = retryDelayMs(++failures, 20_000 - elapsed, 20_000, random);
        if (delay === null) return failures - 1;
        elapsed += delay;
      }
    });
    expect(Math.min(...counts)).toBeGreaterThanOrEqual(5);
    const firstRetries = Array.from({ length: 1_000 }, () => retryDelayMs(1, 20_000, 20_000, random)!);
    // Full jitter over [50, 200): retries of agents that failed together do not come back together.
    expect(busiestSlotShare(firstRetries, 200, 4)).toBeLessThan(0.5);
  });
});

describe('stream reconnect backoff', () => {
  it('is full jitter: anywhere from the floor up to the doubling ceiling', () => {
    for (let attempt = 0; attempt < 12; attempt++) {
      const ceiling = Math.min(30_000, 250 * 2 ** attempt);
      expect(backoffDelayMs(attempt, { baseMs: 250, capMs: 30_000, random: fixed(0) })).toBe(100);
      expect(backoffDelayMs(attempt, { baseMs: 250, capMs: 30_000, random: fixed(ALMOST_ONE) })).toBe(ceiling - 1);
      expect(backoffDelayMs(attempt, { baseMs: 250, capMs: 30_000, random: fixed(0.5) })).toBe(Math.max(100, ceiling / 2));
    }
  });

  it('is capped, and survives absurd attempt counts', () => {
    expect(backoffDelayMs(10_000, { baseMs: 250, capMs: 30_000, random: fixed(ALMOST_ONE) })).toBe(29_999);
    expect(backoffDelayMs(Number.MAX_SAFE_INTEGER, { random: fixed(0.5) })).toBe(15_000);
  });

  it('spreads 1,000 agents that lost their streams together over the whole window', () => {
    const random = seeded(9);
    const delays = Array.from({ length: 1_000 }, () => backoffDelayMs(6, { baseMs: 250, capMs: 30_000, random }));
    expect(busiestSlotShare(delays, 16_000, 16)).toBeLessThan(0.1);
  });
});
