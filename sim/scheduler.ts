/**
 * vLLM's default `max_num_seqs`: the capacity a runtime without `maxSequences` reports its KV-cache use against, so
 * that an unbounded runtime still shows its load.
 */
const NOMINAL_SEQUENCES = 256;

/** One generation request as the scheduler sees it: waiting for a slot, then running until it leaves. */
export interface Sequence {
  /** performance.now() when it asked for a slot: its time to first token counts from here. */
  readonly arrivedAt: number;
  /** performance.now() when its first token is due; undefined while it waits. */
  firstTokenAt: number | undefined;
  /** Tokens decoded after the first, fractional, as of `decodedAt`. */
  decoded: number;
  decodedAt: number;
  /**
   * Called when it gets its slot and whenever its rate changes. It must not generate there and then: a sequence
   * that finishes would leave the scheduler in the middle of another's change.
   */
  wake(): void;
}

export interface SchedulerOptions {
  ttftMs: number;
  /** One sequence's rate; 0 or Infinity: no pacing. */
  tokensPerSecond: number;
  maxSequences?: number;
  sharedTokensPerSecond?: number;
}

/**
 * The runtime's batch: at most `maxSequences` running, the rest waiting in arrival order, and the shared token rate
 * split evenly among the running. Each sequence's progress is integrated at the rate of the moment, so that one
 * joining or leaving slows or speeds the others from then on, not in hindsight.
 */
export function createScheduler(o: SchedulerOptions) {
  const running = new Set<Sequence>();
  // A Set keeps arrival order and lets a request that gives up leave from the middle.
  const waiting = new Set<Sequence>();
  const slots = o.maxSequences ?? Number.POSITIVE_INFINITY;
  // Tokens per millisecond.
  const cap = o.tokensPerSecond > 0 && Number.isFinite(o.tokensPerSecond) ? o.tokensPerSecond / 1000 : Number.POSITIVE_INFINITY;
  const shared = o.sharedTokensPerSecond === undefined ? Number.POSITIVE_INFINITY : o.sharedTokensPerSecond / 1000;
  const rateFor = (n: number): number => Math.min(cap, shared / Math.max(n, 1));
  let rate = rateFor(0);

  /**
   * Brings every running sequence's progress up to `now` at the old rate, then wakes them to the new one. Returns
   * whether it woke them.
   */
  function retune(now: number): boolean {
    const next = rateFor(running.size);
    if (next === rate) return false;
    for (const s of running) {
      if (now > s.decodedAt) {
        s.decoded += rate * (now - s.decodedAt);
        s.decodedAt = now;
      }
    }
    rate = next;
    for (const s of running) s.wake();
    return true;
  }

  function start(s: Sequence, now: number): void {
    s.firstTokenAt = now + o.ttftMs;
    s.decodedAt = s.firstTokenAt;
    running.add(s);
  }

  return {
    sequence(wake: () => void): Sequence {
      return { arrivedAt: performance.now(), firstTokenAt: undefined, decoded: 0, decodedAt: 0, wake };
    },
    /** Runs the sequence at once when a slot is free, else queues it; it is woken when it starts. */
    join(s: Sequence): void {
      if (running.size >= slots) {
        waiting.add(s);
        return;
      }
      const now = performance.now();
      start(s, now);
      if (!retune(now)) s.wake();
    },
    /** Frees its slot (or its place in the queue) for the next to arrive. */
    leave(s: Sequence): void {
      if (waiting.delete(s) || !running.delete(s)) return;
      const now = performance.now();
      const started: Sequence[] = [];
      for (const next of waiting) {
        if (running.size >= slots) break;
        waiting.delete(next);
        start(next, now);
        started.push(next);
      }
      if (!retune(now)) for (const next of started) next.wake();
    },
    /** How many of its `n` tokens are due by `now`. */
    due(s: Sequence, now: number, n: number): number {
      if (s.firstTokenAt === undefined || now < s.firstTokenAt) return 0;
      if (rate === Number.POSITIVE_INFINITY) return n;
      return Math.min(n, 1 + Math.floor(s.decoded + rate * (now - s.decodedAt)));
    },
    /** When its `k`th token is due at the present rate: a running sequence's next wake-up. */
    dueAt(s: Sequence, k: number): number {
      const from = s.decodedAt;
      if (rate === Number.POSITIVE_INFINITY) return from;
      return from + Math.max(0, k - 1 - s.decoded) / rate;
    },
    running: () => running.size,
    waiting: () => waiting.size,
    /** A plausible KV-cache use in 0..1: the running sequences over the slots (or vLLM's default number of them). */
    cacheUsage: () => Math.min(1, running.size / (o.maxSequences ?? NOMINAL_SEQUENCES)),
  };
}
export type Scheduler = ReturnType<typeof createScheduler>;
