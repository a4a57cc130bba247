import { z } from 'zod';

const RowIndex = z.number().int().min(0);

/**
 * The rows of a job that are finished, as sorted, disjoint, non-adjacent inclusive ranges of 0-based row indices:
 * `[[0, 99], [120, 130]]` is rows 0 to 99 and 120 to 130. A job that finishes its rows about in order keeps a
 * handful of ranges for millions of rows. A checkpoint read back is parsed with this schema: one out of order,
 * overlapping, touching its neighbour or reversed is refused rather than repaired, since only a fault writes one.
 */
export const RowRanges = z.array(z.tuple([RowIndex, RowIndex])).superRefine((ranges, ctx) => {
  for (const [i, [start, end]] of ranges.entries()) {
    if (start > end) ctx.addIssue({ code: 'custom', message: `range ${i} ends (${end}) before it starts (${start})`, path: [i] });
    const previous = ranges[i - 1];
    if (previous && start <= previous[1] + 1) {
      ctx.addIssue({ code: 'custom', message: `range ${i} starts at ${start}, not after the end of range ${i - 1} (${previous[1]}) and a gap`, path: [i] });
    }
  }
});
export type RowRanges = z.infer<typeof RowRanges>;

/** The union of two sets of ranges, in one pass over both. */
export function merge(a: RowRanges, b: RowRanges): RowRanges {
  const merged: RowRanges = [];
  let i = 0;
  let j = 0;
  while (i < a.length || j < b.length) {
    const next = j >= b.length || (i < a.length && a[i]![0] <= b[j]![0]) ? a[i++]! : b[j++]!;
    const last = merged[merged.length - 1];
    if (last && next[0] <= last[1] + 1) last[1] = Math.max(last[1], next[1]);
    else merged.push([next[0], next[1]]);
  }
  return merged;
}

/** `ranges` with the rows `rows` (in any order, repeats allowed) added. */
export function addRows(ranges: RowRanges, rows: readonly number[]): RowRanges {
  const added: RowRanges = [];
  for (const row of [...rows].sort((x, y) => x - y)) {
    const last = added[added.length - 1];
    if (last && row <= last[1] + 1) last[1] = Math.max(last[1], row);
    else added.push([row, row]);
  }
  return merge(ranges, added);
}

/** Whether row `row` is finished: a binary search of the ranges. */
export function has(ranges: RowRanges, row: number): boolean {
  let low = 0;
  let high = ranges.length - 1;
  while (low <= high) {
    const middle = (low + high) >>> 1;
    const [start, end] = ranges[middle]!;
    if (row < start) high = middle - 1;
    else if (row > end) low = middle + 1;
    else return true;
  }
  return false;
}

/** How many rows are finished. */
export function count(ranges: RowRanges): number {
  let rows = 0;
  for (const [start, end] of ranges) rows += end - start + 1;
  return rows;
}

/**
 * Up to `limit` of the lowest rows of a job of `total` rows that are neither finished nor in flight, in order: the
 * rows to send next. Walks the gaps between finished ranges, never the finished rows themselves, so its cost is the
 * number of ranges plus the rows it looks at (at most `limit` plus those in flight).
 */
export function nextRows(total: number, done: RowRanges, inFlight: ReadonlySet<number>, limit: number): number[] {
  const rows: number[] = [];
  let from = 0;
  for (let i = 0; i <= done.length && rows.length < limit && from < total; i += 1) {
    const gapEnd = Math.min(total, done[i]?.[0] ?? total);
    for (let row = from; row < gapEnd && rows.length < limit; row += 1) if (!inFlight.has(row)) rows.push(row);
    from = (done[i]?.[1] ?? total) + 1;
  }
  return rows;
}
