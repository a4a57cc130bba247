import pg from 'pg';
import type { Bus, BusMessage } from './bus.js';

/** Postgres NOTIFY payloads must stay under 8,000 bytes. */
export const MAX_NOTIFY_BYTES = 7_900;
const CHANNEL = 'lunanexa_bus';

/**
 * The cross-instance relay bus: Postgres LISTEN/NOTIFY on one channel, one listening connection per
 * instance; messages carry their logical channel and are delivered to local subscribers of it. Publishing
 * to a channel with a local subscriber is also delivered in process (NOTIFY reaches the sender too, so
 * local delivery happens once, from the notification).
 */
export async function createPgBus(url: string, opts: { onError?: (error: Error) => void } = {}): Promise<Bus> {
  const handlers = new Map<string, Set<(message: BusMessage) => void>>();
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
    for (const handler of handlers.get(envelope.c) ?? []) handler(envelope.m);
  });
  await listener.query(`listen ${CHANNEL}`);
  return {
    async publish(channel, message) {
      const payload = JSON.stringify({ c: channel, m: message });
      if (Buffer.byteLength(payload) > MAX_NOTIFY_BYTES) throw new Error(`bus message of ${Buffer.byteLength(payload)} bytes exceeds the NOTIFY limit`);
      await publisher.query('select pg_notify($1, $2)', [CHANNEL, payload]);
    },
    subscribe(channel, handler) {
      let set = handlers.get(channel);
      if (!set) handlers.set(channel, (set = new Set()));
      set.add(handler);
      return () => {
        set.delete(handler);
        if (set.size === 0) handlers.delete(channel);
      };
    },
    async close() {
      handlers.clear();
      await listener.end().catch(() => {});
      await publisher.end().catch(() => {});
    },
  };
}
