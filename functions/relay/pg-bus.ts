import pg from 'pg';
import { createSubscriberRegistry, MAX_NOTIFY_BYTES, type Bus, type BusMessage } from './bus.js';

const CHANNEL = 'lunanexa_bus';
/** Messages per NOTIFY statement, at most (each under 8,000 bytes). */
const MAX_BATCH = 256;
/** pg_notify for each payload, in array order. */
const NOTIFY_IN_ORDER = 'select pg_notify($1, p) from (select p from unnest($2::text[]) with ordinality as t(p, i) order by i) ordered';

/**
 * The cross-instance relay bus: Postgres LISTEN/NOTIFY on one channel, one listening connection per
 * instance; messages carry their logical channel and are delivered to local subscribers of it. Publishing
 * to a channel with a local subscriber is also delivered in process (NOTIFY reaches the sender too, so
 * local delivery happens once, from the notification).
 */
export async function createPgBus(url: string, opts: { onError?: (error: Error) => void } = {}): Promise<Bus> {
  const subscribers = createSubscriberRegistry();
  const listener = new pg.Client({ connectionString: url });
  const publisher = new pg.Pool({ connectionString: url, max: 1 });
  publisher.on('error', (error) => opts.onError?.(error));
  listener.on('error', (error) => opts.onError?.(error));
  await listener.connect();
  listener.on('notification', (notification) => {
    if (!notification.payload) return;
    let envelope: { c: string; s: number; m: BusMessage };
    try {
      envelope = JSON.parse(notification.payload) as { c: string; s: number; m: BusMessage };
    } catch {
      opts.onError?.(new Error('malformed bus notification'));
      return;
    }
    subscribers.deliver(envelope.c, envelope.m);
  });
  await listener.query(`listen ${CHANNEL}`);
  // Group commit: the messages published while a NOTIFY statement is in flight go out together in the next
  // one, in the order published. One statement at a time keeps that order end to end (NOTIFYs committed on
  // several connections at once arrive in any order, and a relay's frames must reach the client in order);
  // one statement per batch keeps a busy relay at a few round trips per millisecond instead of one per
  // frame batch. Each payload carries a sequence number because PostgreSQL folds identical payloads sent
  // in one transaction into one notification.
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
    async close() {
      subscribers.clear();
      await listener.end().catch(() => {});
      await publisher.end().catch(() => {});
    },
  };
}
