import { describe, expect, it } from 'vitest';
import { toCsv } from '../../shared/csv.js';
import { ApiError } from '../../functions/kernel/errors.js';
import { recordedTokens } from '../../functions/dataplane/answer.js';
import { usageQuery, USAGE_MAX_DAYS } from '../../functions/services/usage.js';
import { parseCsv } from '../helpers/csv.js';

/** The pure parts of usage: what a request is recorded with, which report a query asks for, and its CSV. */

describe('recordedTokens', () => {
  const end = (promptTokens: number | null, completionTokens: number | null, tokens = 9) => ({
    o: 3,
    t: 'end' as const,
    tokens,
    promptTokens,
    completionTokens,
  });

  it("takes the runtime's usage where it reported one, streamed or not", () => {
    expect(recordedTokens(end(12, 5), true)).toEqual({ promptTokens: 12, completionTokens: 5 });
    expect(recordedTokens(end(12, 5, 0), false)).toEqual({ promptTokens: 12, completionTokens: 5 });
    expect(recordedTokens(end(0, 0), true)).toEqual({ promptTokens: 0, completionTokens: 0 });
  });

  it("falls back to the agent's count for a stream without usage, and to unknown for a whole answer", () => {
    expect(recordedTokens(end(null, null, 9), true)).toEqual({ promptTokens: null, completionTokens: 9 });
    expect(recordedTokens(end(null, null, 0), false)).toEqual({ promptTokens: null, completionTokens: null });
    // Embeddings: prompt tokens only.
    expect(recordedTokens(end(7, null, 0), false)).toEqual({ promptTokens: 7, completionTokens: null });
  });

  it('records a count the int4 columns cannot hold as unknown, rather than lose the row', () => {
    expect(recordedTokens(end(2 ** 31, 2 ** 31 - 1), true)).toEqual({ promptTokens: null, completionTokens: 2 ** 31 - 1 });
    expect(recordedTokens(end(null, null, 0xffffffff), true)).toEqual({ promptTokens: null, completionTokens: null });
  });
});

describe('usageQuery', () => {
  const now = new Date('2026-03-15T23:59:59.999Z');
  const refused = (input: Parameters<typeof usageQuery>[0]): string => {
    try {
      usageQuery(input, now);
    } catch (error) {
      expect(error).toBeInstanceOf(ApiError);
      expect((error as ApiError).status).toBe(400);
      return (error as ApiError).message;
    }
    throw new Error(`accepted ${JSON.stringify(input)}`);
  };

  it('defaults to the last 30 days up to today (UTC), grouped by day, token and model', () => {
    expect(usageQuery({}, now)).toEqual({ from: '2026-02-14', to: '2026-03-15', groupBy: ['day', 'token', 'model'] });
    expect(usageQuery({ to: '2026-01-10' }, now)).toEqual({ from: '2025-12-12', to: '2026-01-10', groupBy: ['day', 'token', 'model'] });
    expect(usageQuery({ from: '2026-03-01' }, now)).toMatchObject({ from: '2026-03-01', to: '2026-03-15' });
  });

  it('takes one day, and up to a leap year of them', () => {
    expect(usageQuery({ from: '2026-03-15', to: '2026-03-15' }, now)).toMatchObject({ from: '2026-03-15', to: '2026-03-15' });
    expect(usageQuery({ from: '2024-01-01', to: '2024-12-31' }, now)).toMatchObject({ from: '2024-01-01', to: '2024-12-31' });
    expect(refused({ from: '2024-01-01', to: '2025-01-01' })).toContain(`at most ${USAGE_MAX_DAYS} days`);
  });

  it('groups by the dimensions named, in their canonical order, each once', () => {
    expect(usageQuery({ groupBy: 'model,day' }, now).groupBy).toEqual(['day', 'model']);
    expect(usageQuery({ groupBy: 'token' }, now).groupBy).toEqual(['token']);
    expect(usageQuery({ groupBy: 'model,model' }, now).groupBy).toEqual(['model']);
  });

  it('refuses what is not a day, a reversed range and unknown dimensions', () => {
    for (const day of ['2026-02-30', '2026-13-01', '2026-1-05', '20260105', 'yesterday', '', '2026-01-05T00:00:00Z', ' 2026-01-05']) {
      expect(refused({ from: day, to: '2026-03-01' })).toContain('from must be a date');
      expect(refused({ to: day })).toContain('to must be a date');
    }
    expect(refused({ from: '2026-03-02', to: '2026-03-01' })).toContain('after');
    for (const groupBy of ['', 'day,', 'day,colour', 'DAY', 'day token']) expect(refused({ groupBy })).toContain('groupBy');
  });
});

describe('toCsv', () => {
  const columns = ['name', 'count', 'note'] as const;

  it('writes a header and one CRLF line per row, null as an empty field', () => {
    expect(toCsv(columns, [{ name: 'a', count: 1, note: null }])).toBe('name,count,note\r\na,1,\r\n');
    expect(toCsv(columns, [])).toBe('name,count,note\r\n');
  });

  it('quotes fields with commas, quotes and line breaks, so that they read back as written', () => {
    const rows = [
      { name: 'billing, "team" A', count: 3, note: 'line one\nline two' },
      { name: '"', count: 0, note: 'cr\r\nlf' },
      { name: '=SUM(A1:A9)', count: -1, note: ' spaced ' },
      { name: 'ünïcode ✓', count: 12345678901, note: '' },
    ];
    const csv = toCsv(columns, rows);
    expect(csv.split('\r\n')[1]).toBe('"billing, ""team"" A",3,"line one\nline two"');
    expect(parseCsv(csv)).toEqual([[...columns], ...rows.map((r) => [r.name, String(r.count), r.note])]);
  });
});
