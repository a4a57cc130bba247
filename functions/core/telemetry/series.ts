/**
 * A machine's or a deployment's recent history as charts and the autoscaler read it: samples grouped into at most
 * `points` equal buckets over the window, each number the mean of the bucket's samples (null where none had one).
 * Pure.
 */
export interface Bucketed<K extends string> {
  /** The bucket's start (epoch ms). */
  at: number;
  values: Record<K, number | null>;
}

/** Buckets of `stepMs` from `from` to `to`, each with the mean of the values its samples carry. */
export function bucketize<K extends string>(
  samples: ReadonlyArray<{ at: number; values: Partial<Record<K, number | null>> }>,
  keys: readonly K[],
  window: { from: number; to: number; points: number },
): { stepMs: number; buckets: Bucketed<K>[] } {
  const span = Math.max(1, window.to - window.from);
  const stepMs = Math.max(1, Math.ceil(span / Math.max(1, window.points)));
  const count = Math.ceil(span / stepMs);
  const sums = Array.from({ length: count }, () => new Map<K, { sum: number; n: number }>());
  for (const sample of samples) {
    if (sample.at < window.from || sample.at >= window.to) continue;
    const bucket = sums[Math.floor((sample.at - window.from) / stepMs)]!;
    for (const key of keys) {
      const value = sample.values[key];
      if (value === null || value === undefined || !Number.isFinite(value)) continue;
      const acc = bucket.get(key) ?? { sum: 0, n: 0 };
      acc.sum += value;
      acc.n += 1;
      bucket.set(key, acc);
    }
  }
  const buckets = sums.map((bucket, i) => {
    const values = {} as Record<K, number | null>;
    for (const key of keys) {
      const acc = bucket.get(key);
      values[key] = acc ? acc.sum / acc.n : null;
    }
    return { at: window.from + i * stepMs, values };
  });
  return { stepMs, buckets };
}
