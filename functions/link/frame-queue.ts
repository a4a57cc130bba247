import type { Frame } from '../../shared/contracts/relay.js';
import type { FrameSink } from './holder.js';
import type { RelayBudget } from './relay-budget.js';

/** Why a queue stopped taking frames: its reader stayed behind past the relay's bound. */
export const CLIENT_TOO_SLOW = 'client_too_slow';

export type QueueItem = { kind: 'frames'; frames: Frame[] } | { kind: 'failed'; code: string; message: string };

/** How one queue is bounded: see `FrameQueue`. */
export interface FrameQueueOptions {
  /** The instance's account of answer bytes held; null: the queue holds what it is given (tests of other parts). */
  budget: RelayBudget | null;
  /** Flow control: data bytes the queue takes beyond what its consumer took (0: none, the answer is held whole). */
  window?: number;
  /** With a window: a consumer that takes nothing for this long while frames wait is cut as `client_too_slow`. */
  stallMs?: number;
}

/**
 * The waiting side of one invocation: a single-consumer queue. Frames that arrive while the consumer is busy
 * are handed over together on its next read, so a burst costs one wake-up and one write to the client.
 *
 * With a budget, the bytes it holds are counted against the instance's bound for streamed answers: a consumer
 * that stays behind (its client stopped reading) past it makes the queue drop what it holds, take nothing more,
 * hand the consumer a `client_too_slow` failure and call `onOverflow`, so that the client can be cut at once.
 *
 * With a window, the queue is paced (docs/relay.md, "Memory"): what its consumer takes is reported to
 * `onPassedOn`, which the link holder turns into credit for the node, so the node sends at most a window ahead of
 * the client; a consumer that takes nothing for `stallMs` while frames wait is cut the same way.
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
  private readonly budget: RelayBudget | null;
  readonly window: number;
  private readonly stallMs: number;
  /** When the consumer last took frames (epoch ms); read by the stall check, which runs only while frames wait. */
  private takenAt = Date.now();
  private stallTimer: ReturnType<typeof setTimeout> | undefined;
  /** Wakes whoever waits for room below the window (`room`). */
  private roomWaiters: Array<() => void> = [];
  /** Called once when the consumer stayed behind past the budget's bound or the stall limit. */
  onOverflow: (() => void) | null = null;
  /** With a window: the data bytes the consumer took, each time it takes some (the link holder credits them). */
  onPassedOn: ((bytes: number) => void) | null = null;

  constructor(opts: FrameQueueOptions) {
    this.budget = opts.budget;
    this.window = opts.window ?? 0;
    this.stallMs = opts.stallMs ?? 0;
  }

  frame(frame: Frame): void {
    if (this.closed || this.failure) return;
    if (frame.t === 'data') {
      if (this.budget && !this.budget.take('streamed', this.holding, frame.d.length)) return this.overflow();
      this.holding += frame.d.length;
      if (this.stallMs > 0 && this.stallTimer === undefined) this.armStall(this.stallMs);
    }
    this.frames.push(frame);
    this.wake?.();
  }

  /**
   * Null while the queue holds less than its window (or has none), else a promise that settles once the consumer
   * took frames or the queue ended: a reader of forwarded frames waits on it, so that back-pressure crosses the
   * peer connection instead of piling up here.
   */
  room(): Promise<void> | null {
    if (this.window === 0 || this.holding < this.window || this.closed || this.failure) return null;
    return new Promise((resolve) => this.roomWaiters.push(resolve));
  }

  private armStall(ms: number): void {
    // One timer while frames wait, re-armed for what is left when the consumer took some meanwhile: a timer per
    // batch would cost more than the relay's own work on this path.
    this.stallTimer = setTimeout(() => {
      this.stallTimer = undefined;
      if (this.holding === 0 || this.closed || this.failure) return;
      const idle = Date.now() - this.takenAt;
      if (idle >= this.stallMs) this.overflow();
      else this.armStall(this.stallMs - idle);
    }, ms);
  }

  private overflow(): void {
    this.drop();
    this.failure = { kind: 'failed', code: CLIENT_TOO_SLOW, message: "the client read the answer slower than the runtime wrote it, past the relay's bound" };
    this.wake?.();
    this.onOverflow?.();
  }

  /** Frees what the queue holds, and whoever waits for room. */
  private drop(): void {
    this.frames = [];
    this.budget?.give(this.holding);
    this.holding = 0;
    clearTimeout(this.stallTimer);
    this.stallTimer = undefined;
    this.freeRoom();
  }

  private freeRoom(): void {
    if (this.roomWaiters.length === 0) return;
    const waiters = this.roomWaiters;
    this.roomWaiters = [];
    for (const resolve of waiters) resolve();
  }

  fail(code: string, message: string): void {
    if (this.closed || this.failure) return;
    this.failure = { kind: 'failed', code, message };
    this.freeRoom();
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
        const taken = this.holding;
        this.budget?.give(taken);
        this.holding = 0;
        if (this.stallMs > 0) this.takenAt = Date.now();
        if (taken > 0) {
          this.onPassedOn?.(taken);
          this.freeRoom();
        }
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
