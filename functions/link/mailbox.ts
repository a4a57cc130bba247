import type { BusMessage } from '../kernel/ports/bus.js';

/** How long a message nobody waits for yet is kept for the waiter that is on its way. */
const KEEP_MS = 10_000;
/** Channels with undelivered messages, at most: a flood of answers nobody asked for is dropped, oldest first. */
const MAX_CHANNELS = 256;

/**
 * One-shot channels inside a machine's Durable Object (`logs:<machine>:…` answers): the request waiting for an
 * answer and the agent upload carrying it arrive as separate requests, in either order, from any isolate. A
 * message meets the waiter already there, or waits `KEEP_MS` for it.
 */
export class Mailbox {
  private readonly kept = new Map<string, { messages: BusMessage[]; at: number }>();
  private readonly waiters = new Map<string, Set<(message: BusMessage) => void>>();

  put(channel: string, message: BusMessage): void {
    const waiting = this.waiters.get(channel);
    if (waiting && waiting.size > 0) {
      for (const deliver of waiting) deliver(message);
      return;
    }
    this.forgetOld();
    const entry = this.kept.get(channel) ?? { messages: [], at: Date.now() };
    entry.messages.push(message);
    this.kept.set(channel, entry);
    while (this.kept.size > MAX_CHANNELS) this.kept.delete(this.kept.keys().next().value!);
  }

  /** The next message on `channel`, or null after `timeoutMs`. */
  take(channel: string, timeoutMs: number): Promise<BusMessage | null> {
    this.forgetOld();
    const entry = this.kept.get(channel);
    const first = entry?.messages.shift();
    if (entry && entry.messages.length === 0) this.kept.delete(channel);
    if (first) return Promise.resolve(first);
    return new Promise((resolve) => {
      let set = this.waiters.get(channel);
      if (!set) this.waiters.set(channel, (set = new Set()));
      const waiting = set;
      const done = (message: BusMessage | null) => {
        clearTimeout(timer);
        waiting.delete(deliver);
        if (waiting.size === 0) this.waiters.delete(channel);
        resolve(message);
      };
      const deliver = (message: BusMessage) => done(message);
      const timer = setTimeout(() => done(null), timeoutMs);
      waiting.add(deliver);
    });
  }

  private forgetOld(): void {
    const cutoff = Date.now() - KEEP_MS;
    for (const [channel, entry] of this.kept) if (entry.at < cutoff) this.kept.delete(channel);
  }
}
