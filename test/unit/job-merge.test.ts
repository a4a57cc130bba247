import { describe, expect, it } from 'vitest';
import { mergeByRow } from '../../functions/core/jobs/merge.js';

async function* from<T>(items: T[]): AsyncGenerator<T> {
  for (const item of items) yield item;
}
const rows = (...ns: number[]) => ns.map((row) => ({ row, tag: `r${row}` }));
async function all<T>(source: AsyncGenerator<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of source) out.push(item);
  return out;
}

describe('merging sorted parts by row', () => {
  it('gives every row of every source once, in row order', async () => {
    const merged = await all(mergeByRow([from(rows(0, 3, 9)), from(rows(1, 2, 10)), from([]), from(rows(4, 5, 6, 7, 8))]));
    expect(merged.map((r) => r.row)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
  });

  it('gives nothing for no source or empty ones', async () => {
    expect(await all(mergeByRow([]))).toEqual([]);
    expect(await all(mergeByRow([from([]), from([])]))).toEqual([]);
  });

  it('keeps a row found twice once per source, the earlier source first', async () => {
    const merged = await all(mergeByRow([from([{ row: 1, tag: 'a' }]), from([{ row: 1, tag: 'b' }])]));
    expect(merged.map((r) => r.tag)).toEqual(['a', 'b']);
  });

  it('merges many interleaved sources of random sizes', async () => {
    let seed = 7;
    const random = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    const total = 5_000;
    const parts: number[][] = Array.from({ length: 37 }, () => []);
    for (let row = 0; row < total; row++) parts[random(parts.length)]!.push(row);
    const merged = await all(mergeByRow(parts.map((p) => from(rows(...p)))));
    expect(merged.map((r) => r.row)).toEqual(Array.from({ length: total }, (_, i) => i));
  });

  it('holds one item per source: a source is not read ahead of the merge', async () => {
    let read = 0;
    async function* counted(items: number[]) {
      for (const row of items) {
        read += 1;
        yield { row };
      }
    }
    const merge = mergeByRow([counted([0, 2, 4, 6]), counted([1, 3, 5, 7])]);
    await merge.next();
    expect(read).toBeLessThanOrEqual(3);
  });
});
