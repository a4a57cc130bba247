import { describe, expect, it } from 'vitest';
import { addRows, count, has, merge, nextRows, RowRanges } from '../../shared/batch/checkpoint.js';

/** Deterministic pseudo-random integers in [0, bound): a failure can be replayed from its seed. */
function randoms(seed: number, length: number, bound: number): number[] {
  let state = seed;
  return Array.from({ length }, () => {
    state = (Math.imul(state, 1_664_525) + 1_013_904_223) >>> 0;
    return state % bound;
  });
}

/** The rows of a set of ranges, one by one: the model the compact form is checked against. */
function expand(ranges: RowRanges): number[] {
  return ranges.flatMap(([start, end]) => Array.from({ length: end - start + 1 }, (_, i) => start + i));
}

function frozen(ranges: RowRanges): RowRanges {
  return Object.freeze(ranges.map((range) => Object.freeze(range))) as unknown as RowRanges;
}

const NONE: ReadonlySet<number> = new Set();

describe('RowRanges', () => {
  it.each([
    [[]],
    [[[0, 0]]],
    [
      [
        [0, 99],
        [120, 130],
      ],
    ],
    [
      [
        [5, 5],
        [7, 7],
        [9, 1_000_000_000],
      ],
    ],
  ])('takes %j', (ranges) => {
    expect(RowRanges.parse(ranges)).toEqual(ranges);
  });

  it.each([
    [
      'out of order',
      [
        [5, 6],
        [0, 1],
      ],
    ],
    [
      'overlapping',
      [
        [0, 5],
        [3, 8],
      ],
    ],
    [
      'touching (not merged)',
      [
        [0, 5],
        [6, 8],
      ],
    ],
    [
      'repeated',
      [
        [0, 5],
        [0, 5],
      ],
    ],
    ['reversed', [[5, 3]]],
    ['negative', [[-1, 3]]],
    ['fractional', [[0, 1.5]]],
    ['beyond exact integers', [[0, 2 ** 53]]],
    ['a range of one number', [[1]]],
    ['a range of three', [[1, 2, 3]]],
    ['text', [['0', '9']]],
    ['no list', { from: 0, to: 9 }],
    ['null', null],
  ])('refuses a checkpoint %s', (_name, ranges) => {
    expect(RowRanges.safeParse(ranges).success).toBe(false);
  });

  it('round-trips through JSON', () => {
    const ranges = addRows([], randoms(1, 500, 2_000));
    expect(RowRanges.parse(JSON.parse(JSON.stringify(ranges)))).toEqual(ranges);
  });
});

describe('adding and merging rows', () => {
  it('adds rows in any order, repeats allowed, as the fewest ranges', () => {
    expect(addRows([], [5, 3, 4, 9, 4, 0, 10, 11])).toEqual([
      [0, 0],
      [3, 5],
      [9, 11],
    ]);
    expect(addRows([], [])).toEqual([]);
    expect(addRows([[0, 4]], [5])).toEqual([[0, 5]]);
    expect(addRows([[2, 4]], [1])).toEqual([[1, 4]]);
    expect(
      addRows(
        [
          [0, 4],
          [6, 9],
        ],
        [5],
      ),
    ).toEqual([[0, 9]]);
    expect(addRows([[0, 9]], [3, 9, 0])).toEqual([[0, 9]]);
  });

  it('merges overlapping, touching, nested and separate ranges', () => {
    expect(merge([[0, 5]], [[3, 8]])).toEqual([[0, 8]]);
    expect(merge([[0, 5]], [[6, 8]])).toEqual([[0, 8]]);
    expect(
      merge(
        [[0, 100]],
        [
          [10, 20],
          [30, 40],
        ],
      ),
    ).toEqual([[0, 100]]);
    expect(merge([[0, 1]], [[3, 4]])).toEqual([
      [0, 1],
      [3, 4],
    ]);
    expect(merge([], [[3, 4]])).toEqual([[3, 4]]);
    expect(merge([[3, 4]], [])).toEqual([[3, 4]]);
    expect(merge([], [])).toEqual([]);
  });

  it('agrees with a set of rows, whatever the rows (seeded)', () => {
    for (let seed = 1; seed <= 30; seed += 1) {
      const a = randoms(seed, 150, 300);
      const b = randoms(seed + 1000, 150, 300);
      const union = [...new Set([...a, ...b])].sort((x, y) => x - y);
      const merged = merge(addRows([], a), addRows([], b));
      expect(expand(merged)).toEqual(union);
      expect(RowRanges.safeParse(merged).success).toBe(true);
      expect(merge(addRows([], b), addRows([], a))).toEqual(merged);
      expect(addRows(addRows([], a), b)).toEqual(merged);
      expect(merge(merged, merged)).toEqual(merged);
      expect(count(merged)).toBe(union.length);
      for (let row = -1; row <= 301; row += 1) expect(has(merged, row)).toBe(union.includes(row));
    }
  });

  it('leaves its arguments as they were', () => {
    const a = frozen([
      [0, 4],
      [10, 12],
    ]);
    const b = frozen([[5, 9]]);
    expect(merge(a, b)).toEqual([[0, 12]]);
    expect(addRows(a, [5, 6, 7, 8, 9])).toEqual([[0, 12]]);
    expect(a).toEqual([
      [0, 4],
      [10, 12],
    ]);
  });
});

describe('has and count', () => {
  const ranges: RowRanges = [
    [0, 99],
    [120, 130],
    [500, 500],
  ];

  it('finds a row at each edge of each range, and none in the gaps', () => {
    expect([0, 99, 120, 130, 500].map((row) => has(ranges, row))).toEqual([true, true, true, true, true]);
    expect([-1, 100, 119, 131, 499, 501, 10_000_000].map((row) => has(ranges, row))).toEqual([false, false, false, false, false, false, false]);
    expect(has([], 0)).toBe(false);
  });

  it('counts rows, not ranges', () => {
    expect(count(ranges)).toBe(100 + 11 + 1);
    expect(count([])).toBe(0);
    expect(count([[7, 7]])).toBe(1);
  });
});

describe('nextRows', () => {
  it('gives the lowest rows neither done nor in flight, in order, up to the limit', () => {
    expect(nextRows(10, [[2, 3]], new Set([0, 5]), 4)).toEqual([1, 4, 6, 7]);
    expect(
      nextRows(
        10,
        [
          [0, 3],
          [6, 9],
        ],
        NONE,
        10,
      ),
    ).toEqual([4, 5]);
    expect(nextRows(10, [], NONE, 3)).toEqual([0, 1, 2]);
    expect(nextRows(10, [], NONE, 0)).toEqual([]);
  });

  it('gives nothing for an empty job, one row for a job of one, nothing once it is done', () => {
    expect(nextRows(0, [], NONE, 10)).toEqual([]);
    expect(nextRows(1, [], NONE, 10)).toEqual([0]);
    expect(nextRows(1, [], new Set([0]), 10)).toEqual([]);
    expect(nextRows(1, [[0, 0]], NONE, 10)).toEqual([]);
  });

  it('never gives a row past the end, nor one finished beyond it', () => {
    expect(nextRows(5, [[3, 100]], NONE, 10)).toEqual([0, 1, 2]);
    expect(nextRows(5, [[7, 9]], NONE, 10)).toEqual([0, 1, 2, 3, 4]);
  });
});

describe('a job of 10 million rows', () => {
  const TOTAL = 10_000_000;

  it('checkpoints every row, finished in chunks out of order, as one range', () => {
    let done: RowRanges = [];
    const chunk = 10_000;
    const order = Array.from({ length: TOTAL / chunk }, (_, i) => i);
    // Runners finish chunks out of order: pairs swapped, and every 50th late by 7 chunks.
    for (let i = 0; i + 1 < order.length; i += 2) [order[i], order[i + 1]] = [order[i + 1]!, order[i]!];
    for (let i = 0; i + 7 < order.length; i += 50) [order[i], order[i + 7]] = [order[i + 7]!, order[i]!];
    let mostRanges = 0;
    for (const c of order) {
      done = addRows(
        done,
        Array.from({ length: chunk }, (_, i) => c * chunk + i),
      );
      mostRanges = Math.max(mostRanges, done.length);
    }
    expect(done).toEqual([[0, TOTAL - 1]]);
    expect(count(done)).toBe(TOTAL);
    expect(nextRows(TOTAL, done, NONE, 100)).toEqual([]);
    expect(mostRanges).toBeLessThan(10);
    expect(JSON.stringify(done)).toBe('[[0,9999999]]');
  });

  it('finds the rows left without walking the finished ones', () => {
    const done: RowRanges = [
      [0, 4_999_999],
      [5_000_001, TOTAL - 2],
    ];
    const looked: number[] = [];
    const inFlight = {
      has: (row: number) => {
        looked.push(row);
        return row === 5_000_000;
      },
    } as unknown as ReadonlySet<number>;
    expect(nextRows(TOTAL, done, inFlight, 10)).toEqual([TOTAL - 1]);
    expect(looked).toEqual([5_000_000, TOTAL - 1]);
    expect(count(done)).toBe(TOTAL - 2);
    expect([has(done, 4_999_999), has(done, 5_000_000), has(done, TOTAL - 2), has(done, TOTAL - 1)]).toEqual([true, false, true, false]);
  });

  it('stays correct for a checkpoint of a million ranges (every other row done)', () => {
    const done: RowRanges = Array.from({ length: 1_000_000 }, (_, i) => [2 * i, 2 * i] as [number, number]);
    expect(RowRanges.safeParse(done).success).toBe(true);
    expect(count(done)).toBe(1_000_000);
    expect(nextRows(TOTAL, done, new Set([1]), 4)).toEqual([3, 5, 7, 9]);
    expect([has(done, 1_999_998), has(done, 1_999_999), has(done, 2_000_000)]).toEqual([true, false, false]);
    expect(addRows(done, [1])[0]).toEqual([0, 2]);
  });
});
