import pg from 'pg';
import { afterEach, expect, it } from 'vitest';
import { createPgBus, LISTENER_NAME, type PgBus } from '../../functions/store/pg-bus.js';
import type { BusMessage } from '../../functions/kernel/ports/bus.js';
import { createTestDatabase, describePg, PG_URL } from '../helpers/pg.js';
import { waitFor } from '../helpers/plane.js';

/**
 * The Postgres bus after its connections are lost: the listening connection killed by the server, and the
 * whole database gone and back (dropped and created again, which the shared test server allows; restarting
 * it would disturb every other suite). Timings are deadlines to poll against, never expected durations.
 */
describePg('the Postgres bus heals', () => {
  const cleanup: Array<() => Promise<void>> = [];
  afterEach(async () => {
    for (const step of cleanup.splice(0).reverse()) await step().catch(() => {});
  });

  async function database() {
    const db = await createTestDatabase();
    cleanup.push(db.drop);
    const name = new URL(db.url).pathname.slice(1);
    const admin = async (statement: string) => {
      const client = new pg.Client({ connectionString: PG_URL });
      await client.connect();
      try {
        return await client.query(statement);
      } finally {
        await client.end();
      }
    };
    return {
      url: db.url,
      /** Every connection to the database is cut, and new ones are refused until `create`. */
      drop: () => admin(`drop database ${name} with (force)`),
      create: () => admin(`create database ${name}`),
      /** Cuts the listening connections of the database; answers how many there were. */
      killListeners: async () =>
        (
          await admin(
            `select pg_terminate_backend(pid) from pg_stat_activity where datname = '${name}' and (query ilike 'listen%' or application_name = '${LISTENER_NAME}')`,
          )
        ).rowCount ?? 0,
    };
  }

  async function bus(url: string, opts: Parameters<typeof createPgBus>[1] = {}): Promise<PgBus> {
    const created = await createPgBus(url, opts);
    cleanup.push(() => created.close());
    return created;
  }

  /** Publishes a fresh message every 200 ms until `got` sees one of them: a NOTIFY sent before LISTEN is back is lost. */
  async function deliveredAgain(from: PgBus, channel: string, got: string[], what: string) {
    let n = 0;
    await waitFor(
      async () => {
        if (got.length > 0) return true;
        await from.publish(channel, { type: 'revoked', reason: `probe-${(n += 1)}` }).catch(() => {});
        return false;
      },
      { timeoutMs: 20_000, intervalMs: 200, what },
    );
  }

  const reasons = (got: string[]) => (message: BusMessage) => {
    if (message.type === 'revoked') got.push(message.reason);
  };

  it('listens again after its listening connection is killed, calls onReconnect, and delivers what is published next', async () => {
    const db = await database();
    let reconnected = 0;
    const errors: Error[] = [];
    const a = await bus(db.url, { onReconnect: () => (reconnected += 1), onError: (error) => errors.push(error) });
    const b = await bus(db.url);
    const got: string[] = [];
    a.subscribe('machine:heal', reasons(got));
    await deliveredAgain(b, 'machine:heal', got, 'delivery before the kill');

    expect(await db.killListeners()).toBeGreaterThanOrEqual(1);
    got.length = 0;
    await deliveredAgain(b, 'machine:heal', got, 'delivery after the listening connection was killed');
    expect(reconnected).toBeGreaterThanOrEqual(1);
    expect(errors.length).toBeGreaterThanOrEqual(1);
    expect(a.stats()).toMatchObject({ listening: true });
    expect(a.stats().reconnects).toBe(reconnected);

    // Healed for good, not once: a second kill heals the same way.
    const before = reconnected;
    expect(await db.killListeners()).toBeGreaterThanOrEqual(1);
    got.length = 0;
    await deliveredAgain(b, 'machine:heal', got, 'delivery after the second kill');
    expect(reconnected).toBeGreaterThan(before);
  });

  it('rejects publishes while the database is gone, keeps its queue moving, and works again once it is back', async () => {
    const db = await database();
    let reconnected = 0;
    const a = await bus(db.url, { onReconnect: () => (reconnected += 1), onError: () => {} });
    const b = await bus(db.url, { onError: () => {} });
    const got: string[] = [];
    a.subscribe('machine:outage', reasons(got));
    await deliveredAgain(b, 'machine:outage', got, 'delivery before the outage');

    await db.drop();
    // Queued together: every one of them settles (rejected), none waits for ever behind a failed statement.
    const during = await Promise.allSettled(Array.from({ length: 5 }, (_, i) => b.publish('machine:outage', { type: 'revoked', reason: `lost-${i}` })));
    expect(during.map((r) => r.status)).toEqual(Array(5).fill('rejected'));
    await waitFor(async () => !a.stats().listening && a.stats().errors >= 2, {
      timeoutMs: 20_000,
      what: 'failed reconnect attempts while the database is gone',
    });

    await db.create();
    got.length = 0;
    await deliveredAgain(b, 'machine:outage', got, 'delivery once the database is back');
    expect(reconnected).toBeGreaterThanOrEqual(1);
    expect(a.stats().listening).toBe(true);
    // A publish after the outage resolves: the publisher's pool replaced its dead connection.
    await expect(b.publish('machine:outage', { type: 'revoked', reason: 'after' })).resolves.toBeUndefined();
  });

  it('stops reconnecting once closed', async () => {
    const db = await database();
    let reconnected = 0;
    const a = await createPgBus(db.url, { onReconnect: () => (reconnected += 1), onError: () => {}, backoff: { initialMs: 20, maxMs: 50 } });
    await db.drop();
    await waitFor(async () => a.stats().errors >= 3, { timeoutMs: 20_000, what: 'reconnect attempts failing' });
    await a.close();
    const errors = a.stats().errors;
    await db.create();
    // Many backoff periods: a timer left behind would have tried again, and found the database back.
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    expect(a.stats().errors).toBe(errors);
    expect(reconnected).toBe(0);
  });
});
