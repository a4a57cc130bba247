interface Running<T> {
  promise: Promise<T>;
  controller: AbortController;
  waiters: number;
}

/**
 * Work that several callers wait for at once, each with its own abort signal (two assignments of one version, two
 * versions sharing a file): the first caller starts it, the others join, each caller's abort rejects its own wait
 * at once, and the work itself is aborted only when every caller has given up. A key's next work starts once an
 * abandoned one has settled: both would write the same files.
 */
export class SharedWork<T> {
  private readonly running = new Map<string, Running<T>>();
  private readonly abandoned = new Map<string, Promise<unknown>>();

  /** The keys whose work is under way. */
  keys(): IterableIterator<string> {
    return this.running.keys();
  }

  join(key: string, work: (signal: AbortSignal) => Promise<T>, signal: AbortSignal): Promise<T> {
    if (signal.aborted) return Promise.reject(signal.reason as Error);
    const entry = this.running.get(key) ?? this.begin(key, work);
    entry.waiters += 1;
    return new Promise<T>((resolve, reject) => {
      const onAbort = () => {
        reject(signal.reason as Error);
        if (--entry.waiters > 0 || this.running.get(key) !== entry) return;
        this.running.delete(key);
        this.abandoned.set(key, entry.promise);
        entry.controller.abort(signal.reason);
      };
      signal.addEventListener('abort', onAbort, { once: true });
      entry.promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
    });
  }

  private begin(key: string, work: (signal: AbortSignal) => Promise<T>): Running<T> {
    const controller = new AbortController();
    const before = this.abandoned.get(key) ?? Promise.resolve();
    const promise = before
      // The abandoned run's failure was its own callers'; this run only waits for it to let go.
      .catch(() => {})
      .then(() => {
        controller.signal.throwIfAborted();
        return work(controller.signal);
      });
    const entry: Running<T> = { promise, controller, waiters: 0 };
    this.running.set(key, entry);
    const settled = () => {
      if (this.running.get(key) === entry) this.running.delete(key);
      if (this.abandoned.get(key) === promise) this.abandoned.delete(key);
    };
    promise.then(settled, settled);
    return entry;
  }
}
