/**
 * The window the rate is measured over, unless the caller passes another: a minute, long enough to smooth the
 * bursts of rows that finish together at a checkpoint, short enough to follow a change of pace (a replica added).
 */
export const DEFAULT_RATE_WINDOW_MS = 60_000;

/** Rows finished (either way) by time `at` (ms since the epoch), as the caller sampled them. */
export interface ProgressSample {
  at: number;
  done: number;
}

export interface BatchProgress {
  /** Rows in the input; null until the input has been read to its end. */
  total: number | null;
  /** Finished rows, failed ones included. */
  done: number;
  failed: number;
  succeeded: number;
  remaining: number | null;
  /** Rows per second over the window; null without two samples in it. */
  rate: number | null;
  /** Milliseconds until the last row finishes at that rate: 0 once none remain, null while the total or a rate above 0 is unknown. */
  etaMs: number | null;
}

/**
 * Where a job stands at `now`, from its recent samples (any order) and its totals. Rows done are the newest sample's.
 * The rate is the rows finished between the oldest and the newest sample within `[now - windowMs, now]`, over the
 * time between them: a job restarted from a checkpoint is not credited with the rows it had already done, and one
 * that was not sampled lately has no rate rather than a stale one.
 */
export function batchProgress(input: {
  samples: readonly ProgressSample[];
  total: number | null;
  failed: number;
  now: number;
  windowMs?: number;
}): BatchProgress {
  const windowStart = input.now - (input.windowMs ?? DEFAULT_RATE_WINDOW_MS);
  const samples = [...input.samples].sort((a, b) => a.at - b.at);
  const done = samples[samples.length - 1]?.done ?? 0;
  const recent = samples.filter((sample) => sample.at >= windowStart && sample.at <= input.now);
  const first = recent[0];
  const last = recent[recent.length - 1];
  const rate = first && last && last.at > first.at ? (Math.max(0, last.done - first.done) * 1000) / (last.at - first.at) : null;
  const remaining = input.total === null ? null : Math.max(0, input.total - done);
  const etaMs = remaining === 0 ? 0 : remaining !== null && rate ? Math.ceil((remaining / rate) * 1000) : null;
  return { total: input.total, done, failed: input.failed, succeeded: Math.max(0, done - input.failed), remaining, rate, etaMs };
}
