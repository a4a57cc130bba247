import type { Frame } from '../../shared/contracts/relay.js';
import type { FrameSink } from './holder.js';

export type QueueItem = { kind: 'frames'; frames: Frame[] } | { kind: 'failed'; code: string; message: string };

/**
 * The waiting side of one invocation: a single-consumer queue. Frames that arrive while the consumer is busy
 * are handed over together on its next read, so a burst costs one wake-up and one write to the client.
 */
export class FrameQueue implements FrameSink {
  private frames: Frame[] = [];
  private failure: QueueItem | null = null;
  private wake: (() => void) | null = null;
  private closed = false;
  /** The signals that wake this queue when they abort: listened to once each, not once per wait. */
  private readonly watched = new WeakSet<AbortSignal>();

  frame(frame: Frame): void {
    if (this.closed) return;
    this.frames.push(frame);
    this.wake?.();
  }

  fail(code: string, message: string): void {
    if (this.closed || this.failure) return;
    this.failure = { kind: 'failed', code, message };
    this.wake?.();
  }

  /**
   * Everything that arrived since the last read (frames first, then a failure), or null once `signal` aborts or,
   * with `untilMs`, once that time (epoch ms) has come with nothing to read.
   */
  async next(signal?: AbortSignal, untilMs?: number): Promise<QueueItem | null> {
    for (;;) {
      if (this.frames.length > 0) {
        const frames = this.frames;
        this.frames = [];
        return { kind: 'frames', frames };
      }
      if (this.failure) return this.failure;
      if (signal?.aborted || this.closed) return null;
      if (untilMs !== undefined && Date.now() >= untilMs) return null;
      // A streamed answer waits here once per batch: adding and removing an abort listener each time (EventTarget)
      // cost more than the wait itself.
      if (signal && !this.watched.has(signal)) {
        this.watched.add(signal);
        signal.addEventListener('abort', () => this.wake?.(), { once: true });
      }
      let timer: ReturnType<typeof setTimeout> | undefined;
      await new Promise<void>((resolve) => {
        this.wake = resolve;
        if (untilMs !== undefined) timer = setTimeout(resolve, untilMs - Date.now());
      });
      clearTimeout(timer);
      this.wake = null;
    }
  }

  close(): void {
    this.closed = true;
    this.wake?.();
  }
}
