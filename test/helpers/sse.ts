/** One parsed Server-Sent Events item: a named message or a comment line (keep-alive). */
export type SseItem =
  | { kind: 'event'; event: string; data: string; id: string | undefined; at: number }
  | { kind: 'comment'; text: string; at: number };

/**
 * A minimal incremental SSE reader over a fetch body, so tests see each frame as it arrives (including the
 * comment keep-alives that EventSource hides). `next` resolves with `null` once the stream has ended.
 */
export class SseReader {
  private readonly queue: SseItem[] = [];
  private readonly waiters: Array<() => void> = [];
  private buffer = '';
  private finished = false;
  /** When the server ended the stream (or the read failed), by `Date.now()`. */
  endedAt: number | null = null;
  readonly pumping: Promise<void>;

  constructor(body: ReadableStream<Uint8Array>) {
    this.pumping = this.pump(body.getReader());
  }

  private async pump(reader: ReadableStreamDefaultReader<Uint8Array>): Promise<void> {
    const decoder = new TextDecoder();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        this.buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, '\n');
        let cut: number;
        while ((cut = this.buffer.indexOf('\n\n')) >= 0) {
          this.parseBlock(this.buffer.slice(0, cut));
          this.buffer = this.buffer.slice(cut + 2);
        }
      }
    } catch {
      // An aborted or reset body is an end of stream for the test's purposes.
    } finally {
      this.finished = true;
      this.endedAt = Date.now();
      this.wake();
    }
  }

  private parseBlock(block: string) {
    const at = Date.now();
    let event = 'message';
    let id: string | undefined;
    const data: string[] = [];
    let hasField = false;
    for (const line of block.split('\n')) {
      if (line.startsWith(':')) {
        this.queue.push({ kind: 'comment', text: line.slice(1).trim(), at });
        continue;
      }
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
      hasField = true;
      if (field === 'event') event = value;
      else if (field === 'data') data.push(value);
      else if (field === 'id') id = value;
    }
    if (hasField) this.queue.push({ kind: 'event', event, data: data.join('\n'), id, at });
    this.wake();
  }

  private wake() {
    for (const waiter of this.waiters.splice(0)) waiter();
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
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  /** The next named event, skipping comments; `null` when the stream ended first. */
  async nextEvent(timeoutMs: number): Promise<Extract<SseItem, { kind: 'event' }> | null> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const item = await this.next(Math.max(1, deadline - Date.now()));
      if (item === null || item.kind === 'event') return item;
    }
  }

  /** The next comment, skipping events; `null` when the stream ended first. */
  async nextComment(timeoutMs: number): Promise<Extract<SseItem, { kind: 'comment' }> | null> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const item = await this.next(Math.max(1, deadline - Date.now()));
      if (item === null || item.kind === 'comment') return item;
    }
  }

  /** Resolves true once the stream has ended, false if it is still open after `timeoutMs`. */
  async waitForEnd(timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (!this.finished && Date.now() < deadline) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, deadline - Date.now());
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    return this.finished;
  }
}
