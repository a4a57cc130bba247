/**
 * Merges sources each sorted by `row` into one sequence sorted by `row` (a k-way merge over a binary heap: O(n log k)
 * for n items from k sources), pulling one item at a time from each: memory holds one item per source. A row found
 * in two sources (which checkpoints never write) comes out once per source, in source order.
 */
export async function* mergeByRow<T extends { row: number }>(sources: ReadonlyArray<AsyncIterator<T>>): AsyncGenerator<T> {
  const heap: Array<{ item: T; source: number }> = [];
  const less = (a: number, b: number) =>
    heap[a]!.item.row < heap[b]!.item.row || (heap[a]!.item.row === heap[b]!.item.row && heap[a]!.source < heap[b]!.source);
  const swap = (a: number, b: number) => {
    const t = heap[a]!;
    heap[a] = heap[b]!;
    heap[b] = t;
  };
  const up = (i: number) => {
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!less(i, parent)) return;
      swap(i, parent);
      i = parent;
    }
  };
  const down = (i: number) => {
    for (;;) {
      const left = 2 * i + 1;
      const right = left + 1;
      let least = i;
      if (left < heap.length && less(left, least)) least = left;
      if (right < heap.length && less(right, least)) least = right;
      if (least === i) return;
      swap(i, least);
      i = least;
    }
  };
  const pull = async (source: number) => {
    const next = await sources[source]!.next();
    if (next.done) return false;
    heap.push({ item: next.value, source });
    up(heap.length - 1);
    return true;
  };
  for (let s = 0; s < sources.length; s++) await pull(s);
  while (heap.length > 0) {
    const top = heap[0]!;
    yield top.item;
    const last = heap.pop()!;
    if (heap.length > 0) {
      heap[0] = last;
      down(0);
    }
    await pull(top.source);
  }
}
