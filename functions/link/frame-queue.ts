import type { Frame } from '../../shared/contracts/relay.js';
import type { FrameSink } from './holder.js';
import type { RelayBudget } from './relay-budget.js';

/** Why a queue stopped taking frames: its reader stayed behind past the relay's bound. */
export const CLIENT_TOO_SLOW = 'client_too_slow';

export type QueueItem = { kind: 'frames'; frames: Frame[] } | { kind: 'failed'; code: string; message: string };

/**
 * The waiting side of one invocation: a single-consumer queue. Frames that arrive while the consumer is busy
 * are handed over together on its next read, so a burst costs one wake-up and one write to the client.
 *
 * With a budget, the bytes it holds are counted against the instance's bound for streamed answers: a consumer
 * that stays behind (its client stopped reading) past it makes the queue drop what it holds, take nothing more,
 * hand the consumer a `client_too_slow` failure and call `onOverflow`, so that the client can be cut at once.
 */
export class FrameQueue implements FrameSink {
  private frames: Frame[] = [];
  private failure: QueueItem | null = null;
  private wake: (() => void) | null = null;
  private closed = false;
  /** Data bytes held in `frames`, counted in the budget. */
  private holding = 0;
  /** The signals that wake this queue when they abort: listened to once each, not once per wait. */
  private readonly watched = new WeakSet<AbortSignal>();
  /** Called once when the consumer stayed behind past the budget's bound. */
  onOverflow: (() => void) | null = null;

  constructor(private readonly budget: RelayBudget | null = null) {}

  frame(frame: Frame): void {
    if (this.closed || this.failure) return;
    if (this.budget && frame.t === 'data') {
      if (!this.budget.take('streamed', this.holding, frame.d.length)) return this.overflow();
      this.holding += frame.d.length;
    }
    this.frames.push(frame);
    this.wake?.();
  }

  private overflow(): void {
    this.drop();
    this.failure = { kind: 'failed', code: CLIENT_TOO_SLOW, message: "the client read the answer slower than the runtime wrote it, past the relay's bound" };
    this.wake?.();
    this.onOverflow?.();
  }

  /** Frees what the queue holds. */
  private drop(): void {
    this.frames = [];
    this.budget?.give(this.holding);
    this.holding = 0;
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
        // Handed to the consumer: from here its bytes are the consumer's (a write to the client, or a plain
        // answer's own count).
        this.budget?.give(this.holding);
        this.holding = 0;
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
    this.drop();
    this.wake?.();
  }
}
