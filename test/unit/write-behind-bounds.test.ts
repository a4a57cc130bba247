import { describe, expect, it } from 'vitest';
import { WriteBehind } from '../../functions/store/write-behind.js';

/** What PostgreSQL says of a value that does not fit its column (SQLSTATE class 22). */
const dataError = () => Object.assign(new Error('integer out of range'), { code: '22003' });

describe('WriteBehind isolates the rows that fail a group commit', () => {
  it('writes every good item, in order, and reports each bad one alone', async () => {
    const written: string[] = [];
    const dropped: Array<{ items: number; code: unknown }> = [];
    let calls = 0;
    const wb = new WriteBehind<string>(
      async (items) => {
        calls += 1;
        if (items.some((i) => i.startsWith('bad'))) throw dataError();
        written.push(...items);
      },
      { delayMs: 60_000, maxBatch: 1_000, onError: (error, items) => dropped.push({ items, code: (error as { code?: unknown }).code }) },
    );
    const keys = Array.from({ length: 100 }, (_, i) => ([3, 50, 99].includes(i) ? `bad-${i}` : `ok-${i}`));
    for (const key of keys) wb.put(key, key);
    await wb.flush();
    expect(written).toEqual(keys.filter((k) => k.startsWith('ok')));
    expect(dropped).toEqual([
      { items: 1, code: '22003' },
      { items: 1, code: '22003' },
      { items: 1, code: '22003' },
    ]);
    // Bisection: a few statements per bad row, not one per row.
    expect(calls).toBeLessThan(45);
  });

  it('isolates an item that cannot even become a parameter (an invalid Date)', async () => {
    const written: string[] = [];
    const dropped: number[] = [];
    const wb = new WriteBehind<{ id: string; at: Date }>(
      async (items) => {
        const row = items.map((i) => `${i.id}@${i.at.toISOString()}`);
        written.push(...row);
      },
      { delayMs: 60_000, maxBatch: 1_000, onError: (_error, items) => dropped.push(items) },
    );
    wb.put('a', { id: 'a', at: new Date(0) });
    wb.put('b', { id: 'b', at: new Date(1e20) });
    wb.put('c', { id: 'c', at: new Date(1) });
    await wb.flush();
    expect(written).toEqual(['a@1970-01-01T00:00:00.000Z', 'c@1970-01-01T00:00:00.001Z']);
    expect(dropped).toEqual([1]);
  });

  it('drops a batch whole, with one statement, when the failure is no row of it (the store is down)', async () => {
    let calls = 0;
    const dropped: number[] = [];
    const wb = new WriteBehind<string>(
      async () => {
        calls += 1;
        throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
      },
      { delayMs: 60_000, maxBatch: 1_000, onError: (_error, items) => dropped.push(items) },
    );
    for (let i = 0; i < 64; i += 1) wb.put(`k${i}`, `v${i}`);
    await wb.flush();
    expect(calls).toBe(1);
    expect(dropped).toEqual([64]);
  });

  it('keeps a later state of a key after an earlier one while a batch is being isolated', async () => {
    const written: string[] = [];
    const wb = new WriteBehind<string>(
      async (items) => {
        if (items.includes('bad')) throw dataError();
        written.push(...items);
      },
      { delayMs: 60_000, maxBatch: 1_000, onError: () => {} },
    );
    wb.put('a', 'a:running');
    wb.put('x', 'bad');
    const first = wb.flush();
    wb.put('a', 'a:succeeded');
    await Promise.all([first, wb.flush()]);
    expect(written).toEqual(['a:running', 'a:succeeded']);
  });
});
