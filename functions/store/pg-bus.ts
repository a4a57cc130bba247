import pg from 'pg';
import { MAX_NOTIFY_BYTES, type Bus, type BusMessage } from '../kernel/ports/bus.js';
import { createSubscriberRegistry } from '../kernel/memory-bus.js';

const CHANNEL = 'lunanexa_bus';
/** Messages per NOTIFY statement, at most (each under 8,000 bytes). */
const MAX_BATCH = 256;
/** pg_notify for each payload, in array order. */
const NOTIFY_IN_ORDER = 'select pg_notify($1, p) from (select p from unnest($2::text[]) with ordinality as t(p, i) order by i) ordered';
/**
 * A connection or statement that has not answered in this long is taken for dead: a network partition sends
 * no error, and TCP alone would take minutes to give up.
 */
const TIMEOUT_MS = 10_000;
/** How often the listening connection proves it still answers (it sends nothing of its own otherwise). */
const PING_MS = 15_000;

/** `application_name` of the listening connection, as `pg_stat_activity` shows it to operators. */
export const LISTENER_NAME = 'lunanexa bus listener';

export interface PgBusOptions {
  /** Connection errors, malformed notifications, subscribers that throw: reported here, never thrown. */
  onError?: (error: Error) => void;
  /**
   * LISTEN is back after the listening connection was lost (not called on the first connect). What was
   * notified meanwhile never arrives: this is where the instance re-reads it.
   */
  onReconnect?: () => void;
  /** Wait before reconnecting: `initialMs` after a loss, doubling per failed attempt up to `maxMs`, jittered. */
  backoff?: { initialMs: number; maxMs: number };
}

interface PgBusStats {
  /** LISTEN is in place now. */
  listening: boolean;
  /** Times LISTEN was re-established after a loss. */
  reconnects: number;
  /** Errors reported through `onError`. */
  errors: number;
}

export interface PgBus extends Bus {
  stats(): PgBusStats;
}

type Envelope = { c: string; s: number; m: BusMessage };

/**
 * The cross-instance relay bus: Postgres LISTEN/NOTIFY on one channel, one listening connection per
 * instance; messages carry their logical channel and are delivered to local subscribers of it. Publishing
 * to a channel with a local subscriber is also delivered in process (NOTIFY reaches the sender too, so
 * local delivery happens once, from the notification).
 *
 * The listening connection heals: after any error or end of it (database restart, network error,
 * `pg_terminate_backend`) a new one listens again, after a jittered exponential backoff, and `onReconnect`
 * runs. The first connect is not retried: the returned promise rejects, as a start-up failure should.
 */
export async function createPgBus(url: string, opts: PgBusOptions = {}): Promise<PgBus> {
  const { initialMs, maxMs } = opts.backoff ?? { initialMs: 100, maxMs: 5_000 };
  const stats = { reconnects: 0, errors: 0 };
  const report = (error: unknown) => {
    stats.errors += 1;
    opts.onError?.(error instanceof Error ? error : new Error(String(error)));
  };
  const subscribers = createSubscriberRegistry(report);
  const publisher = new pg.Pool({ connectionString: url, max: 1, keepAlive: true, connectionTimeoutMillis: TIMEOUT_MS, query_timeout: TIMEOUT_MS });
  publisher.on('error', report);
  // The pool hears only its idle clients; a checked-out one's failure rejects the statement it runs.
  publisher.on('connect', (client) => client.on('error', () => {}));

  const onNotification = (notification: pg.Notification) => {
    if (!notification.payload) return;
    let envelope: Envelope;
    try {
      envelope = JSON.parse(notification.payload) as Envelope;
    } catch {
      report(new Error('malformed bus notification'));
      return;
    }
    subscribers.deliver(envelope.c, envelope.m);
  };

  let closed = false;
  /** The connection LISTEN is in place on; null while it is being re-established. */
  let listener: pg.Client | null = null;
  let attempt = 0;
  let retryTimer: NodeJS.Timeout | undefined;

  /** A client listening on the bus channel; one that fails on the way is ended, and the failure rethrown. */
  const listen = async (): Promise<pg.Client> => {
    const client = new pg.Client({
      connectionString: url,
      application_name: LISTENER_NAME,
      keepAlive: true,
      connectionTimeoutMillis: TIMEOUT_MS,
      query_timeout: TIMEOUT_MS,
    });
    client.on('error', (error) => lost(client, error));
    client.on('end', () => lost(client, new Error('the bus listening connection ended')));
    client.on('notification', onNotification);
    try {
      await client.connect();
      await client.query(`listen ${CHANNEL}`);
      return client;
    } catch (error) {
      // Silent by design: the failure that matters is rethrown; ending the half-open client may fail as well.
      void client.end().catch(() => {});
      throw error;
    }
  };

  /** The listening connection failed or ended (an old one, already replaced, is no news). */
  const lost = (client: pg.Client, error: Error) => {
    if (client !== listener || closed) return;
    listener = null;
    report(error);
    // Silent by design: the loss was just reported; ending a client that already failed may fail as well.
    void client.end().catch(() => {});
    scheduleReconnect();
  };

  const scheduleReconnect = () => {
    if (closed || retryTimer) return;
    const ceiling = Math.min(maxMs, initialMs * 2 ** Math.min(attempt, 30));
    attempt += 1;
    // Jitter, so that the instances of a cluster do not all come back in the same instant.
    retryTimer = setTimeout(() => void reconnect(), ceiling / 2 + (Math.random() * ceiling) / 2);
  };

  const reconnect = async () => {
    retryTimer = undefined;
    let client: pg.Client;
    try {
      client = await listen();
    } catch (error) {
      if (closed) return;
      report(error);
      scheduleReconnect();
      return;
    }
    if (closed) {
      // Silent by design: the bus closed while this client connected; it is dropped, and nobody is listening.
      await client.end().catch(() => {});
      return;
    }
    listener = client;
    attempt = 0;
    stats.reconnects += 1;
    try {
      opts.onReconnect?.();
    } catch (error) {
      report(error);
    }
  };

  listener = await listen();

  const ping = setInterval(() => {
    const client = listener;
    client?.query('select 1').catch((error: Error) => lost(client, error));
  }, PING_MS);
  ping.unref();

  // Group commit: the messages published while a NOTIFY statement is in flight go out together in the next
  // one, in the order published. One statement at a time keeps that order end to end (NOTIFYs committed on
  // several connections at once arrive in any order, and a relay's frames must reach the client in order);
  // one statement per batch keeps a busy relay at a few round trips per millisecond instead of one per
  // frame batch. Each payload carries a sequence number because PostgreSQL folds identical payloads sent
  // in one transaction into one notification. A failed statement rejects the publishes of its batch (the
  // pool replaces the connection) and the queue goes on with the next batch.
  const queue: Array<{ payload: string; settle: (error?: unknown) => void }> = [];
  let flushing = false;
  let sequence = 0;
  const flush = async () => {
    flushing = true;
    while (queue.length > 0) {
      const batch = queue.splice(0, MAX_BATCH);
      try {
        if (batch.length === 1) await publisher.query({ name: 'lunanexa-notify', text: 'select pg_notify($1, $2)', values: [CHANNEL, batch[0]!.payload] });
        else await publisher.query({ name: 'lunanexa-notify-batch', text: NOTIFY_IN_ORDER, values: [CHANNEL, batch.map((item) => item.payload)] });
        for (const item of batch) item.settle();
      } catch (error) {
        for (const item of batch) item.settle(error);
      }
    }
    flushing = false;
  };
  return {
    async publish(channel, message) {
      const payload = JSON.stringify({ c: channel, s: ++sequence, m: message });
      if (Buffer.byteLength(payload) > MAX_NOTIFY_BYTES) throw new Error(`bus message of ${Buffer.byteLength(payload)} bytes exceeds the NOTIFY limit`);
      await new Promise<void>((resolve, reject) => {
        queue.push({ payload, settle: (error) => (error === undefined ? resolve() : reject(error instanceof Error ? error : new Error(String(error)))) });
        if (!flushing) void flush();
      });
    },
    subscribe: subscribers.subscribe,
    localChannels: subscribers.channels,
    deliverLocal: subscribers.deliver,
    stats: () => ({ listening: listener !== null, ...stats }),
    async close() {
      closed = true;
      clearTimeout(retryTimer);
      clearInterval(ping);
      subscribers.clear();
      // Silent by design: closing; a connection that fails to end cleanly is gone all the same.
      await listener?.end().catch(() => {});
      listener = null;
      await publisher.end().catch(() => {});
    },
  };
}
