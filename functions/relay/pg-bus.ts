import pg from 'pg';
import { createSubscriberRegistry, MAX_NOTIFY_BYTES, type Bus, type BusMessage } from './bus.js';

export { MAX_NOTIFY_BYTES };
const CHANNEL = 'lunanexa_bus';

/**
 * The cross-instance relay bus: Postgres LISTEN/NOTIFY on one channel, one listening connection per
 * instance; messages carry their logical channel and are delivered to local subscribers of it. Publishing
 * to a channel with a local subscriber is also delivered in process (NOTIFY reaches the sender too, so
 * local delivery happens once, from the notification).
 */
export async function createPgBus(url: string, opts: { onError?: (error: Error) => void } = {}): Promise<Bus> {
  const subscribers = createSubscriberRegistry();
  const listener = new pg.Client({ connectionString: url });
  const publisher = new pg.Pool({ connectionString: url, max: 4 });
  publisher.on('error', (error) => opts.onError?.(error));
  listener.on('error', (error) => opts.onError?.(error));
  await listener.connect();
  listener.on('notification', (notification) => {
    if (!notification.payload) return;
    let envelope: { c: string; m: BusMessage };
    try {
      envelope = JSON.parse(notification.payload) as { c: string; m: BusMessage };
    } catch {
      opts.onError?.(new Error('malformed bus notification'));
      return;
    }
    subscribers.deliver(envelope.c, envelope.m);
  });
  await listener.query(`listen ${CHANNEL}`);
  // The messages of one channel go out one after another. NOTIFYs sent at once on several pool connections
  // commit, and so arrive, in any order, and a relay's frames must reach the client in the order sent.
  const tails = new Map<string, Promise<void>>();
  return {
    async publish(channel, message) {
      const payload = JSON.stringify({ c: channel, m: message });
      if (Buffer.byteLength(payload) > MAX_NOTIFY_BYTES) throw new Error(`bus message of ${Buffer.byteLength(payload)} bytes exceeds the NOTIFY limit`);
      const sent = (tails.get(channel) ?? Promise.resolve()).then(async () => {
        await publisher.query('select pg_notify($1, $2)', [CHANNEL, payload]);
      });
      const tail = sent.catch(() => {});
      tails.set(channel, tail);
      void tail.then(() => {
        if (tails.get(channel) === tail) tails.delete(channel);
      });
      await sent;
    },
    subscribe: subscribers.subscribe,
    async close() {
      subscribers.clear();
      await listener.end().catch(() => {});
      await publisher.end().catch(() => {});
    },
  };
}
