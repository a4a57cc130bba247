import { describe, expect, it } from 'vitest';
import { resolveDeadline } from '../../functions/api/v1/deadline.js';

const NOW = Date.UTC(2026, 0, 1);
const HOUR = 3_600_000;
const limits = { now: NOW, defaultMs: 10 * 60_000, maxMs: HOUR };
const resolve = (header: string | undefined, timeoutS?: number) => resolveDeadline({ header, timeoutS, ...limits });

describe('the deadline of an inference request', () => {
  it('defaults, and takes the body timeout in seconds, rounded up to a whole millisecond', () => {
    expect(resolve(undefined)).toEqual({ ok: true, deadline: NOW + 10 * 60_000 });
    expect(resolve(undefined, 30)).toEqual({ ok: true, deadline: NOW + 30_000 });
    expect(resolve(undefined, 0.0015)).toEqual({ ok: true, deadline: NOW + 2 });
    expect(resolveDeadline({ header: undefined, timeoutS: undefined, now: NOW, defaultMs: 5 * HOUR, maxMs: HOUR })).toEqual({ ok: true, deadline: NOW + HOUR });
  });

  it('clamps a body timeout past the maximum to it', () => {
    expect(resolve(undefined, 7_200)).toEqual({ ok: true, deadline: NOW + HOUR });
  });

  it('takes epoch milliseconds and ISO-8601 times', () => {
    expect(resolve(String(NOW + 1_000))).toEqual({ ok: true, deadline: NOW + 1_000 });
    expect(resolve(new Date(NOW + 60_000).toISOString())).toEqual({ ok: true, deadline: NOW + 60_000 });
    expect(resolve('2026-01-01T00:30:00+01:00')).toEqual({ ok: false, reason: 'past' });
    expect(resolve('2026-01-01T00:30:00Z')).toEqual({ ok: true, deadline: NOW + 30 * 60_000 });
  });

  it('clamps a deadline past the maximum, up to a day past it', () => {
    expect(resolve(String(NOW + 2 * HOUR))).toEqual({ ok: true, deadline: NOW + HOUR });
    expect(resolve(String(NOW + 24 * HOUR))).toEqual({ ok: true, deadline: NOW + HOUR });
  });

  it('refuses what is no deadline: unparseable, past 2^53, fractional, signed, out of the Date range, beyond a day past the maximum', () => {
    for (const header of [
      '',
      ' ',
      'tomorrow',
      '12:00',
      '2026-01-02',
      '99999999999999999999',
      String(2 ** 53 + 2),
      '9007199254740993',
      '1e21',
      '12.5',
      '-1',
      '+1',
      'Infinity',
      'NaN',
      '0x10',
      '+275760-09-13T00:00:00.000Z',
      '275760-09-13T00:00:00.001Z',
      String(NOW + 25 * HOUR + 1),
      new Date(NOW + 26 * HOUR).toISOString(),
      `${NOW}${'0'.repeat(300)}`,
    ]) {
      expect(resolve(header), JSON.stringify(header)).toEqual({ ok: false, reason: 'invalid' });
    }
  });

  it('tells a deadline already past', () => {
    expect(resolve(String(NOW - 1))).toEqual({ ok: false, reason: 'past' });
    expect(resolve(String(NOW))).toEqual({ ok: false, reason: 'past' });
    expect(resolve('0')).toEqual({ ok: false, reason: 'past' });
  });

  it('always yields a safe integer within the maximum', () => {
    for (const header of [undefined, String(NOW + 1), String(NOW + 3 * HOUR), new Date(NOW + 1234.5).toISOString()]) {
      for (const timeoutS of [undefined, 0.0001, 1.23456, 3600]) {
        const result = resolve(header, timeoutS);
        if (!result.ok) continue;
        expect(Number.isSafeInteger(result.deadline)).toBe(true);
        expect(result.deadline - NOW).toBeLessThanOrEqual(HOUR);
      }
    }
  });
});
