import { describe, expect, it } from 'vitest';
import { RATE_WINDOW_MS, rateVerdict, retryAfterSeconds } from '../../functions/services/rate-limit.js';

/** 2024-05-01T12:34:00.000Z: the start of a one-minute window. */
const WINDOW = Date.UTC(2024, 4, 1, 12, 34);

describe('retryAfterSeconds', () => {
  it('counts whole seconds to the end of the one-minute window, rounding up', () => {
    expect(retryAfterSeconds(WINDOW)).toBe(60);
    expect(retryAfterSeconds(WINDOW + 1)).toBe(60);
    expect(retryAfterSeconds(WINDOW + 15_000)).toBe(45);
    expect(retryAfterSeconds(WINDOW + 15_001)).toBe(45);
    expect(retryAfterSeconds(WINDOW + 58_999)).toBe(2);
  });

  it("never says less than one second, even in the window's last instant", () => {
    expect(retryAfterSeconds(WINDOW + 59_000)).toBe(1);
    expect(retryAfterSeconds(WINDOW + RATE_WINDOW_MS - 1)).toBe(1);
    expect(retryAfterSeconds(WINDOW + RATE_WINDOW_MS - 0.001)).toBe(1);
  });

  it('starts over with each window', () => {
    expect(retryAfterSeconds(WINDOW + RATE_WINDOW_MS)).toBe(60);
    expect(retryAfterSeconds(WINDOW + 2 * RATE_WINDOW_MS + 30_000)).toBe(30);
  });
});

describe('rateVerdict', () => {
  it('admits up to the limit in a window and refuses past it, with the seconds left', () => {
    expect(rateVerdict({ count: 1, limit: 3, nowMs: WINDOW + 10_000 })).toEqual({ ok: true });
    expect(rateVerdict({ count: 3, limit: 3, nowMs: WINDOW + 10_000 })).toEqual({ ok: true });
    expect(rateVerdict({ count: 4, limit: 3, nowMs: WINDOW + 10_000 })).toEqual({ ok: false, retryAfterS: 50 });
    expect(rateVerdict({ count: 1_000, limit: 1, nowMs: WINDOW + 59_999 })).toEqual({ ok: false, retryAfterS: 1 });
  });
});
