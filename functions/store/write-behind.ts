/**
 * Group commit for hot-path writes no request waits on (workload records, replay-fence entries): items
 * gather for up to `delayMs` (or `maxBatch` items) and go to the store as one multi-row statement. Every
 * write that wakes the database costs a round trip of CPU on both sides, several per inference request
 * otherwise; batched, a busy instance writes a few statements per `delayMs` whatever its request rate.
 *
 * A later item with the same key replaces a pending one (a workload finishing before its `running` row was
 * written is written once, finished). Batches are written one at a time, in order, so a row's last state
 * lands last. `delayMs: 0` writes each item at once (Workers, whose store lives only as long as a request).
 */
export class WriteBehind<T> {
  private pending = new Map<string, T>();
  private writing: Promise<void> | null = null;
  private timer: ReturnType<typeof setTimeout> | null = null;
  /** Puts so far, and how many of them are written: `flush` waits for the count it saw. */
  private queued = 0;
  private written = 0;

  constructor(
    private readonly write: (items: T[]) => Promise<void>,
    private readonly opts: { delayMs: number; maxBatch: number; onError: (error: unknown, items: number) => void },
  ) {}

  /** Queues `item` under `key`, replacing one still pending under the same key. */
  put(key: string, item: T): void {
    this.pending.set(key, item);
    this.queued += 1;
    if (this.opts.delayMs <= 0 || this.pending.size >= this.opts.maxBatch) void this.flush();
    else this.timer ??= setTimeout(() => void this.flush(), this.opts.delayMs);
  }

  /** Writes everything queued before the call; resolves once it is in the store (or its failure was reported). */
  async flush(): Promise<void> {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    const target = this.queued;
    while (this.written < target) {
      if (this.writing) {
        await this.writing;
        continue;
      }
      const batch = [...this.pending.values()];
      const upTo = this.queued;
      this.pending = new Map();
      if (batch.length === 0) {
        this.written = upTo;
        break;
      }
      this.writing = this.write(batch)
        .catch((error: unknown) => this.opts.onError(error, batch.length))
        .finally(() => {
          this.written = upTo;
          this.writing = null;
        });
    }
  }
}
