import { createParser } from 'eventsource-parser';

/**
 * One Server-Sent Events item, stamped with its arrival time: a message (its `event` is `message` when unnamed) or
 * a comment line (keep-alive).
 */
export type SseItem = ({ kind: 'event'; event: string; data: string; id: string | undefined } | { kind: 'comment'; text: string }) & { at: number };

/**
 * A minimal incremental SSE reader over a fetch body, so tests see each frame as it arrives (including the
 * comment keep-alives that EventSource hides). `next` resolves with `null` once the stream has ended.
 */
export class SseReader {
  private readonly queue: SseItem[] = [];
  private readonly waiters: Array<() => void> = [];
  private finished = false;
  /** When the server ended the stream (or the read failed), by `Date.now()`. */
  endedAt: number | null = null;

  constructor(body: ReadableStream<Uint8Array>) {
    void this.pump(body.getReader());
  }

  private async pump(reader: ReadableStreamDefaultReader<Uint8Array>): Promise<void> {
    const decoder = new TextDecoder();
    const parser = createParser({
      onEvent: ({ event, data, id }) => this.queue.push({ kind: 'event', event: event ?? 'message', data, id, at: Date.now() }),
      onComment: (text) => this.queue.push({ kind: 'comment', text: text.trim(), at: Date.now() }),
    });
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        parser.feed(decoder.decode(value, { stream: true }));
        this.wake();
      }
    } catch {
      // An aborted or reset body is an end of stream for the test's purposes.
    } finally {
      this.finished = true;
      this.endedAt = Date.now();
      this.wake();
    }
  }

  private wake() {
    for (const waiter of this.waiters.splice(0)) waiter();
  }

  /** Resolves on the next `wake` (an item arrived or the stream ended), or after `ms` without one. */
  private wait(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.waiters.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  /** The next item, `null` when the stream has ended; rejects after `timeoutMs` without one. */
  async next(timeoutMs: number): Promise<SseItem | null> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const item = this.queue.shift();
      if (item) return item;
      if (this.finished) return null;
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no SSE item within ${timeoutMs} ms`);
      await this.wait(left);
    }
  }

  /**
   * The next named event, skipping comments and the liveness `ping`s (which come every `streamPingMs` and would
   * interleave with whatever a test waits for); `null` when the stream ended first.
   */
  async nextEvent(timeoutMs: number): Promise<Extract<SseItem, { kind: 'event' }> | null> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const item = await this.nextOfKind('event', Math.max(1, deadline - Date.now()));
      if (item === null || item.event !== 'ping') return item;
    }
  }

  /** The next comment, skipping events; `null` when the stream ended first. */
  nextComment(timeoutMs: number): Promise<Extract<SseItem, { kind: 'comment' }> | null> {
    return this.nextOfKind('comment', timeoutMs);
  }

  private async nextOfKind<K extends SseItem['kind']>(kind: K, timeoutMs: number): Promise<Extract<SseItem, { kind: K }> | null> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const item = await this.next(Math.max(1, deadline - Date.now()));
      if (item === null || item.kind === kind) return item as Extract<SseItem, { kind: K }> | null;
    }
  }

  /** Resolves true once the stream has ended, false if it is still open after `timeoutMs`. */
  async waitForEnd(timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (!this.finished && Date.now() < deadline) await this.wait(deadline - Date.now());
    return this.finished;
  }
}
