/**
 * How many of a replica's slots batch rows may hold while interactive requests come to it, moved by the TTFT
 * those requests see (docs/jobs.md, "Batch rows and interactive traffic"): halved when an interactive request's
 * TTFT rose past `RISE` times the replica's own pace, raised a little by each one that did not. Pure: the link
 * holder that admits the replica's invocations keeps one state per replica and feeds it every interactive TTFT.
 */
export interface BatchBackoff {
  /**
   * The replica's own pace: the lowest interactive TTFT seen lately (ms), drifting up slowly toward later ones so
   * that a runtime that became slower for good is not held to its best moment. Null until one was seen.
   */
  paceMs: number | null;
  /** The slots batch rows may hold while interactive requests come (fractional: raised in steps below one). */
  ceiling: number;
}

/** An interactive TTFT above this many times the pace (plus `SLACK_MS`) is a rise: the bound is 1.2. */
export const RISE = 1.2;
/** Below this much above the pace a TTFT is the relay's jitter, not a rise (ms). */
export const SLACK_MS = 5;
/** How far each TTFT above the pace pulls it up (a share of the difference). */
const PACE_DRIFT = 0.02;
/** How much each TTFT that did not rise gives back to batch rows (slots). */
const RAISE_STEP = 0.25;

/**
 * The most slots batch rows may hold on a replica of `concurrency` while interactive requests come: half of them,
 * and at least one kept for interactive traffic (but one at least for batch rows, so that a job still moves).
 * Measured with `npm run bench:batch`: keeping a third left interactive requests waiting behind batch rows often
 * enough to raise their TTFT p99 by half.
 */
export function batchShare(concurrency: number): number {
  return Math.max(1, Math.min(concurrency - 1, Math.floor(concurrency / 2)));
}

/** The state of a replica no interactive request was seen on yet: batch rows may hold their share. */
export function initialBackoff(concurrency: number): BatchBackoff {
  return { paceMs: null, ceiling: batchShare(concurrency) };
}

/** The state after an interactive request on the replica saw its first byte `ttftMs` after it was sent. */
export function observeInteractiveTtft(state: BatchBackoff, ttftMs: number, concurrency: number): BatchBackoff {
  if (!Number.isFinite(ttftMs) || ttftMs < 0) return state;
  const share = batchShare(concurrency);
  if (state.paceMs === null || ttftMs <= state.paceMs) return { paceMs: ttftMs, ceiling: Math.min(share, state.ceiling + RAISE_STEP) };
  const paceMs = state.paceMs + (ttftMs - state.paceMs) * PACE_DRIFT;
  if (ttftMs > state.paceMs * RISE + SLACK_MS) return { paceMs, ceiling: Math.max(1, state.ceiling / 2) };
  return { paceMs, ceiling: Math.min(share, state.ceiling + RAISE_STEP) };
}

/** The slots batch rows may hold now under `state` (whole slots, at least one). */
export function batchSlotsOf(state: BatchBackoff, concurrency: number): number {
  return Math.max(1, Math.min(batchShare(concurrency), Math.floor(state.ceiling)));
}
