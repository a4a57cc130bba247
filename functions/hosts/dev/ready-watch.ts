/**
 * Polls `check` every `intervalMs` until it returns true, then calls `onReady` once. A check that throws (the
 * store is away during a database outage) never ends the process: `onError` hears of it once per run of
 * failures, and polling goes on. `stop()` ends it early.
 */
export function watchUntilReady(opts: { check: () => Promise<boolean>; onReady: () => void; onError: (error: unknown) => void; intervalMs: number }): {
  stop(): void;
} {
  let failing = false;
  let busy = false;
  const timer = setInterval(() => {
    if (busy) return;
    busy = true;
    opts
      .check()
      .then(
        (ready) => {
          failing = false;
          if (!ready) return;
          clearInterval(timer);
          opts.onReady();
        },
        (error: unknown) => {
          if (!failing) opts.onError(error);
          failing = true;
        },
      )
      .finally(() => (busy = false));
  }, opts.intervalMs);
  return { stop: () => clearInterval(timer) };
}
