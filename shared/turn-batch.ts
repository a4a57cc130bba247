/** After the I/O of this turn of the event loop (Node), or as soon as possible (elsewhere). */
export const afterThisTurn: (fn: () => void) => void = typeof setImmediate === 'function' ? (fn) => setImmediate(fn) : (fn) => setTimeout(fn, 0);

/**
 * Collects what is pushed during one turn of the event loop and hands it to `flush` together once the turn's I/O
 * has run: a burst of frames costs one write, whatever their number. `flush()` hands over what is pending now.
 */
export function turnBatch<T>(flush: (items: T[]) => void): { push(item: T): void; flush(): void } {
  let batch: T[] = [];
  const run = () => {
    if (batch.length === 0) return;
    const items = batch;
    batch = [];
    flush(items);
  };
  return {
    push(item) {
      if (batch.length === 0) afterThisTurn(run);
      batch.push(item);
    },
    flush: run,
  };
}
