import { describe, expect, it } from 'vitest';
import type { RowRanges } from '../../shared/batch/checkpoint.js';
import { writeParquetRows } from '../../shared/batch/parquet.js';
import { PendingRows } from '../../shared/batch/pending-rows.js';

/** A body of `n` JSONL lines, cut into chunks of `chunk` bytes as a network would. */
function body(n: number, chunk = 7): ReadableStream<Uint8Array> {
  const bytes = new TextEncoder().encode(Array.from({ length: n }, (_, i) => JSON.stringify({ i })).join('\n'));
  let at = 0;
  return new ReadableStream({
    pull(controller) {
      if (at >= bytes.length) return controller.close();
      controller.enqueue(bytes.subarray(at, at + chunk));
      at += chunk;
    },
  });
}

async function all<T>(rows: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const row of rows) out.push(row);
  return out;
}

const parquet = (n: number) =>
  writeParquetRows(
    Array.from({ length: n }, (_, i) => ({ i })),
    [{ name: 'i', type: 'INT32' }],
    { rowGroupSize: 300 },
  );

describe('the rows a runner has left', () => {
  const cases: { what: string; done: RowRanges; left: number[] }[] = [
    { what: 'nothing done', done: [], left: Array.from({ length: 10 }, (_, i) => i) },
    { what: 'the first rows done', done: [[0, 3]], left: [4, 5, 6, 7, 8, 9] },
    { what: 'the last rows done (a resumed runner whose tail an earlier attempt finished)', done: [[7, 9]], left: [0, 1, 2, 3, 4, 5, 6] },
    {
      what: 'rows in the middle and at the end done',
      done: [
        [2, 4],
        [8, 9],
      ],
      left: [0, 1, 5, 6, 7],
    },
    { what: 'every row done (killed after its last checkpoint, before it said it was done)', done: [[0, 9]], left: [] },
  ];

  for (const { what, done, left } of cases) {
    it(`JSONL, ${what}: yields the rows left and counts the whole input`, async () => {
      const pending = new PendingRows(done);
      const lines = await all(pending.jsonl(body(10)));
      expect(lines.map((l) => l.index)).toEqual(left);
      expect(lines.map((l) => ('text' in l ? JSON.parse(l.text).i : null))).toEqual(left);
      expect(pending.read).toBe(10);
    });

    it(`Parquet, ${what}: yields the rows left and counts the whole input`, async () => {
      const pending = new PendingRows(done);
      const rows = await all(pending.parquet(parquet(10)));
      expect(rows).toEqual(left.map((index) => ({ index, value: { i: index } })));
      expect(pending.read).toBe(10);
    });
  }

  it('counts the rows of slices it skips without decoding them', async () => {
    const pending = new PendingRows([[0, 2_499]]);
    const rows = await all(pending.parquet(parquet(2_600)));
    expect(rows.map((r) => r.index)).toEqual(Array.from({ length: 100 }, (_, i) => 2_500 + i));
    expect(pending.read).toBe(2_600);
  });

  it('counts only what it has read when its reader stops early', async () => {
    const pending = new PendingRows([]);
    for await (const line of pending.jsonl(body(10))) if (line.index === 3) break;
    expect(pending.read).toBe(4);
  });
});
