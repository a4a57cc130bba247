import type { Frame } from '../../shared/contracts/relay.js';

export type QueueItem = { kind: 'frames'; frames: Frame[] } | { kind: 'failed'; code: string; message: string };

/** A single-consumer async queue of frame batches for one invocation; the waiting side of the relay. */
export class FrameQueue {
  private readonly items: QueueItem[] = [];
  private wake: (() => void) | null = null;
  private closed = false;

  push(item: QueueItem): void {
    if (this.closed) return;
    this.items.push(item);
    this.wake?.();
  }

  /** The next item, or null once `signal` aborts. */
  async next(signal?: AbortSignal): Promise<QueueItem | null> {
    for (;;) {
      const item = this.items.shift();
      if (item) return item;
      if (signal?.aborted || this.closed) return null;
      let onAbort: (() => void) | undefined;
      await new Promise<void>((resolve) => {
        this.wake = resolve;
        onAbort = resolve;
        signal?.addEventListener('abort', onAbort, { once: true });
      });
      if (onAbort) signal?.removeEventListener('abort', onAbort);
      this.wake = null;
    }
  }

  close(): void {
    this.closed = true;
    this.wake?.();
  }
}
