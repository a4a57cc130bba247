import { afterAll, beforeAll, expect, it } from 'vitest';
import { createPgBus } from '../../functions/store/pg-bus.js';
import type { Bus, BusMessage } from '../../functions/kernel/ports/bus.js';
import { createTestDatabase, describePg } from '../helpers/pg.js';
import { waitFor } from '../helpers/plane.js';

/** The Postgres bus between two instances (two buses on one database), as the relay uses it. */
describePg('the Postgres LISTEN/NOTIFY bus', () => {
  let database: { url: string; drop(): Promise<void> };
  let a: Bus;
  let b: Bus;
  beforeAll(async () => {
    database = await createTestDatabase();
    a = await createPgBus(database.url);
    b = await createPgBus(database.url);
  });
  afterAll(async () => {
    await a?.close();
    await b?.close();
    await database?.drop();
  });

  const lines = (seq: number, text: string): BusMessage => ({ type: 'log-lines', lines: [String(seq), text] });

  it('delivers every message published at once, in the order published, to the other instance', async () => {
    const got: number[] = [];
    const off = b.subscribe('logs:order', (m) => {
      if (m.type === 'log-lines') got.push(Number(m.lines[0]));
    });
    // Not awaited one by one: they queue behind each other and go out in batches.
    await Promise.all(Array.from({ length: 600 }, (_, i) => a.publish('logs:order', lines(i, `chunk ${i} `.repeat(20)))));
    await waitFor(async () => got.length === 600, { timeoutMs: 10_000, what: '600 messages' });
    expect(got).toEqual(Array.from({ length: 600 }, (_, i) => i));
    off();
  });

  it('delivers identical messages as many times as they were published (PostgreSQL folds identical NOTIFYs in a transaction)', async () => {
    let got = 0;
    const off = b.subscribe('logs:same', () => (got += 1));
    await Promise.all(Array.from({ length: 5 }, () => a.publish('logs:same', lines(7, 'same bytes'))));
    await waitFor(async () => got === 5, { timeoutMs: 5_000, what: 'five identical messages' });
    await new Promise((r) => setTimeout(r, 200));
    expect(got).toBe(5);
    off();
  });

  it('refuses a message over the NOTIFY limit, and goes on delivering the next ones', async () => {
    const got: string[] = [];
    const off = b.subscribe('logs:big', (m) => {
      if (m.type === 'log-lines') got.push(m.lines[1]!);
    });
    await expect(a.publish('logs:big', lines(0, 'x'.repeat(9_000)))).rejects.toThrow(/NOTIFY limit/);
    await a.publish('logs:big', lines(1, 'small'));
    await waitFor(async () => got.length === 1, { timeoutMs: 5_000, what: 'the small message' });
    expect(got).toEqual(['small']);
    off();
  });
});
