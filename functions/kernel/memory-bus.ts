import type { Bus, BusMessage } from './ports/bus.js';

/**
 * Local subscribers by channel: the half of a bus both adapters share. With `onHandlerError`, a handler that
 * throws is reported and the others still run: a delivery from a connection's event must not throw into it.
 */
export function createSubscriberRegistry(onHandlerError?: (error: unknown) => void) {
  const handlers = new Map<string, Set<(message: BusMessage) => void>>();
  return {
    deliver(channel: string, message: BusMessage): void {
      for (const handler of handlers.get(channel) ?? []) {
        try {
          handler(message);
        } catch (error) {
          if (!onHandlerError) throw error;
          onHandlerError(error);
        }
      }
    },
    channels(): string[] {
      return [...handlers.keys()];
    },
    subscribe(channel: string, handler: (message: BusMessage) => void): () => void {
      let set = handlers.get(channel);
      if (!set) handlers.set(channel, (set = new Set()));
      set.add(handler);
      return () => {
        set.delete(handler);
        if (set.size === 0) handlers.delete(channel);
      };
    },
    clear(): void {
      handlers.clear();
    },
  };
}

/** The in-process adapter. */
export function createMemoryBus(): Bus {
  const subscribers = createSubscriberRegistry();
  return {
    async publish(channel, message) {
      subscribers.deliver(channel, message);
    },
    subscribe: subscribers.subscribe,
    localChannels: subscribers.channels,
    deliverLocal: subscribers.deliver,
    async close() {
      subscribers.clear();
    },
  };
}
