import { isRowFault } from '../kernel/db-errors.js';

/**
 * Group commit for hot-path writes no request waits on (workload records, replay-fence entries): items
 * gather for up to `delayMs` (or `maxBatch` items) and go to the store as one multi-row statement. Every
 * write that wakes the database costs a round trip of CPU on both sides, several per inference request
 * otherwise; batched, a busy instance writes a few statements per `delayMs` whatever its request rate.
 *
 * A later item with the same key replaces a pending one (a workload finishing before its `running` row was
 * written is written once, finished). Batches are written one at a time, in order, so a row's last state
 * lands last. `delayMs: 0` writes each item at once (Workers, whose store lives only as long as a request).
 *
 * One bad row must not cost the others of its batch (rows of other requests, other workspaces): when a batch
 * fails for a row's fault (`isolate`, by default a data or integrity error, or a value that cannot become a
 * parameter), it is split in halves and each is written again, down to the rows at fault, which are dropped and
 * reported one by one (`onError(error, 1)`): a few statements per bad row, not one per row. A failure that is
 * no row's fault (the store is down) drops the batch whole, in one report, without a statement per row.
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
    private readonly opts: {
      delayMs: number;
      maxBatch: number;
      /** A batch (or, once isolated, one row) was dropped: count it and log it, without its values. */
      onError: (error: unknown, items: number) => void;
      /** Whether a failure is a row's fault, worth splitting the batch for. */
      isolate?: (error: unknown) => boolean;
    },
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
      this.writing = this.writeIsolating(batch).finally(() => {
        this.written = upTo;
        this.writing = null;
      });
    }
  }

  /** Writes `items`; on a row's fault, each half again, in order, until the rows at fault stand alone. */
  private async writeIsolating(items: T[]): Promise<void> {
    try {
      // A write that throws before its first await (building a parameter) fails the same way as one that rejects.
      await Promise.resolve().then(() => this.write(items));
    } catch (error) {
      if (items.length === 1 || !(this.opts.isolate ?? isRowFault)(error)) {
        this.opts.onError(error, items.length);
        return;
      }
      const half = Math.ceil(items.length / 2);
      await this.writeIsolating(items.slice(0, half));
      await this.writeIsolating(items.slice(half));
    }
  }
}
