import { describe, expect, it } from 'vitest';
import { planEviction, type EvictionInput, type IndexedVersion } from '../../agent/artifacts/evict.js';
import { cachedVersionIds, type CacheIndex } from '../../agent/artifacts/cache-index.js';

/** A digest named by one letter, so that plans read easily. */
const sha = (c: string) => c.repeat(64);
const GiB = 1024 ** 3;

const v = (versionId: string, lastUsedAt: number, blobs: string[]): IndexedVersion => ({ versionId, lastUsedAt, blobs: blobs.map(sha) });
const sizes = (entries: Record<string, number>) => new Map(Object.entries(entries).map(([c, n]) => [sha(c), n]));

/** A cache of three versions a (oldest) .. c (newest), 10 bytes each, b and c sharing blob 'e'. */
const base = (extra: Partial<EvictionInput> = {}): EvictionInput => ({
  maxBytes: 100,
  versions: [v('mv_a', 1, ['a']), v('mv_b', 2, ['b', 'e']), v('mv_c', 3, ['c', 'e'])],
  blobs: sizes({ a: 10, b: 10, c: 10, e: 10 }),
  blobLastUsedAt: new Map(),
  partials: new Map(),
  protectedVersions: new Set(),
  fetching: new Map(),
  incoming: { versionId: 'mv_new', blobs: sizes({ n: 20 }) },
  ...extra,
});
const fits = (versions: string[], blobs: string[], partials: string[] = []) => ({ fits: true, versions, blobs: blobs.map(sha), partials: partials.map(sha) });

describe('planEviction', () => {
  it('removes nothing when the version fits as it is (exactly at the budget too)', () => {
    expect(planEviction(base())).toEqual(fits([], []));
    expect(planEviction(base({ maxBytes: 60 }))).toEqual(fits([], []));
  });

  it('evicts the least recently used version, and only as many as needed', () => {
    expect(planEviction(base({ maxBytes: 50 }))).toEqual(fits(['mv_a'], ['a']));
    expect(planEviction(base({ maxBytes: 40 }))).toEqual(fits(['mv_a', 'mv_b'], ['a', 'b']));
  });

  it('keeps a blob shared with a version that stays, and deletes it with the last version that names it', () => {
    // b goes, e stays for c (above); then c goes and e with it.
    expect(planEviction(base({ maxBytes: 20 }))).toEqual(fits(['mv_a', 'mv_b', 'mv_c'], ['a', 'b', 'c', 'e']));
  });

  it('never evicts a protected version nor its blobs, and goes on to the next least recently used', () => {
    expect(planEviction(base({ maxBytes: 50, protectedVersions: new Set(['mv_a']) }))).toEqual(fits(['mv_b'], ['b']));
    // c in use keeps e, which b shares: evicting b frees only b.
    expect(planEviction(base({ maxBytes: 50, protectedVersions: new Set(['mv_a', 'mv_c']) }))).toEqual(fits(['mv_b'], ['b']));
  });

  it('refuses, naming the budget, the version and what is in use, when even evicting everything unused is not enough', () => {
    const plan = planEviction(base({ maxBytes: 40, protectedVersions: new Set(['mv_a', 'mv_b', 'mv_c']) }));
    expect(plan).toEqual({ fits: false, message: 'cache budget of 40 bytes cannot hold version mv_new (20 bytes) beside the versions in use (40 bytes)' });
    const big = planEviction({
      ...base(),
      maxBytes: 10 * GiB,
      versions: [],
      blobs: new Map(),
      incoming: { versionId: 'mv_big', blobs: sizes({ n: 12 * GiB }) },
    });
    expect(big).toEqual({ fits: false, message: 'cache budget of 10.00 GiB cannot hold version mv_big (12.00 GiB) beside the versions in use (0.00 GiB)' });
  });

  it('counts the blobs the incoming version already has once, and never deletes them', () => {
    // The incoming version shares a (10 bytes, on disk): it adds only n.
    const input = base({ maxBytes: 60, incoming: { versionId: 'mv_new', blobs: sizes({ a: 10, n: 20 }) } });
    expect(planEviction(input)).toEqual(fits([], []));
    // Over budget: a's version may go, but a stays for the incoming one.
    expect(planEviction({ ...input, maxBytes: 50 })).toEqual(fits(['mv_a', 'mv_b'], ['b']));
  });

  it('re-fetching a version already indexed never evicts that version itself', () => {
    const plan = planEviction(base({ maxBytes: 30, incoming: { versionId: 'mv_a', blobs: sizes({ a: 10 }) } }));
    expect(plan).toEqual(fits(['mv_b'], ['b']));
  });

  it('deletes interrupted downloads no protected version needs before any version, and keeps the others', () => {
    const partials = sizes({ x: 15, y: 5 });
    // y belongs to protected mv_p (waiting for fresh URLs): kept; x belongs to nobody.
    const input = base({ maxBytes: 70, partials, versions: [...base().versions, v('mv_p', 0, ['y'])], protectedVersions: new Set(['mv_p']) });
    expect(planEviction(input)).toEqual(fits([], [], ['x']));
    expect(planEviction({ ...input, maxBytes: 60 })).toEqual(fits(['mv_a'], ['a'], ['x']));
  });

  it("counts the incoming version's interrupted download at the file's full size, not twice", () => {
    const input = base({ maxBytes: 60, partials: sizes({ n: 15 }) });
    expect(planEviction(input)).toEqual(fits([], []));
  });

  it('deletes blobs no version names first, the least recently used first', () => {
    const input = base({
      maxBytes: 70,
      blobs: sizes({ a: 10, b: 10, c: 10, e: 10, o: 10, p: 10 }),
      blobLastUsedAt: new Map([
        [sha('o'), 5],
        [sha('p'), 4],
      ]),
    });
    expect(planEviction(input)).toEqual(fits([], ['p']));
    expect(planEviction({ ...input, maxBytes: 60 })).toEqual(fits([], ['p', 'o']));
  });

  it('leaves room for what other fetches are downloading, and never deletes their partials', () => {
    const input = base({ maxBytes: 80, fetching: sizes({ f: 30 }), partials: sizes({ f: 3 }) });
    expect(planEviction(input)).toEqual(fits(['mv_a'], ['a']));
  });

  it('breaks ties in last use by version id, so that the same cache always gives the same plan', () => {
    const input = base({ maxBytes: 50, versions: [v('mv_z', 1, ['a']), v('mv_y', 1, ['b']), v('mv_c', 3, ['c', 'e'])] });
    expect(planEviction(input)).toEqual(fits(['mv_y'], ['b']));
  });
});

describe('cachedVersionIds', () => {
  const entry = (lastUsedAt: number, complete = true) => ({ lastUsedAt, files: [], complete });
  it('lists complete versions only, the newest by use up to the limit, sorted by id', () => {
    const index: CacheIndex = { versions: { mv_c: entry(3), mv_a: entry(1), mv_b: entry(2), mv_d: entry(9, false) }, blobs: {} };
    expect(cachedVersionIds(index, 256)).toEqual(['mv_a', 'mv_b', 'mv_c']);
    expect(cachedVersionIds(index, 2)).toEqual(['mv_b', 'mv_c']);
  });
});
