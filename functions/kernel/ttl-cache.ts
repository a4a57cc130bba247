/**
 * A small map whose entries live `ttlMs` (or less, when set so): the hot path's memory of recent lookups.
 * Bounded: past `maxEntries` it starts afresh rather than grow.
 */
export class TtlCache<V> {
  private readonly entries = new Map<string, { value: V; until: number }>();

  constructor(
    private readonly ttlMs: number,
    private readonly maxEntries = 10_000,
  ) {}

  get(key: string): V | undefined {
    const entry = this.entries.get(key);
    if (entry && entry.until > performance.now()) return entry.value;
    this.entries.delete(key);
    return undefined;
  }

  /** Keeps `value` for the cache's lifetime, or for `ttlMs` when that is shorter. */
  set(key: string, value: V, ttlMs = this.ttlMs): void {
    if (this.entries.size >= this.maxEntries) this.entries.clear();
    this.entries.set(key, { value, until: performance.now() + Math.min(ttlMs, this.ttlMs) });
  }

  clear(): void {
    this.entries.clear();
  }
}
