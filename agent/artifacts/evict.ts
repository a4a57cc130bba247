import { sizeText } from './layout.js';

/** A version the cache index knows, with when it was last used (epoch ms) and the digests of its files. */
export interface IndexedVersion {
  versionId: string;
  lastUsedAt: number;
  blobs: readonly string[];
}

export interface EvictionInput {
  maxBytes: number;
  versions: readonly IndexedVersion[];
  /** Verified blobs on disk: digest → size. */
  blobs: ReadonlyMap<string, number>;
  /** When each blob was last used (epoch ms); an unknown one counts as never. */
  blobLastUsedAt: ReadonlyMap<string, number>;
  /** Downloads in progress or interrupted on disk: digest → bytes so far. */
  partials: ReadonlyMap<string, number>;
  /** Versions nothing may be taken from: those of current assignments, and those being fetched. */
  protectedVersions: ReadonlySet<string>;
  /** Blobs other fetches are downloading: digest → the size they will have. */
  fetching: ReadonlyMap<string, number>;
  /** The version about to be fetched: its distinct blobs, digest → size. */
  incoming: { versionId: string; blobs: ReadonlyMap<string, number> };
}

export type EvictionPlan = { fits: true; versions: string[]; blobs: string[]; partials: string[] } | { fits: false; message: string };

/**
 * What to delete so that the incoming version fits within `maxBytes` beside everything else the cache must keep.
 * Every digest counts once: a blob at its size on disk, a blob being or about to be fetched at its final size, an
 * interrupted download at its bytes so far. Removed first are what no version needs (interrupted downloads of no
 * protected version, blobs no version names, oldest first), then whole versions, least recently used first, each
 * with its blobs that no remaining version and not the incoming one name. Nothing is removed when it fits as it
 * is, and nothing beyond what makes it fit. Pure.
 */
export function planEviction(input: EvictionInput): EvictionPlan {
  const incoming = input.incoming;
  // Digests that must stay whatever happens: the incoming version's and those of every protected version.
  const kept = new Set(incoming.blobs.keys());
  for (const version of input.versions) if (input.protectedVersions.has(version.versionId)) for (const sha of version.blobs) kept.add(sha);
  for (const sha of input.fetching.keys()) kept.add(sha);

  const footprint = new Map<string, number>();
  for (const [sha, bytes] of input.partials) footprint.set(sha, bytes);
  for (const [sha, size] of input.fetching) footprint.set(sha, size);
  for (const [sha, size] of incoming.blobs) footprint.set(sha, size);
  for (const [sha, size] of input.blobs) footprint.set(sha, size);
  let total = sum(footprint.values());

  const plan = { fits: true as const, versions: [] as string[], blobs: [] as string[], partials: [] as string[] };
  const fits = () => total <= input.maxBytes;
  if (fits()) return plan;

  const named = new Map<string, number>();
  for (const version of input.versions) for (const sha of version.blobs) named.set(sha, (named.get(sha) ?? 0) + 1);
  const lastUsed = (sha: string) => input.blobLastUsedAt.get(sha) ?? 0;
  const dropBlob = (sha: string) => {
    plan.blobs.push(sha);
    total -= input.blobs.get(sha)!;
  };

  const stalePartials = [...input.partials.keys()].filter((sha) => !kept.has(sha) && !input.blobs.has(sha)).sort();
  for (const sha of stalePartials) {
    if (fits()) return plan;
    plan.partials.push(sha);
    total -= input.partials.get(sha)!;
  }
  const orphans = [...input.blobs.keys()].filter((sha) => !kept.has(sha) && !named.has(sha)).sort((a, b) => lastUsed(a) - lastUsed(b) || (a < b ? -1 : 1));
  for (const sha of orphans) {
    if (fits()) return plan;
    dropBlob(sha);
  }
  const evictable = input.versions
    .filter((version) => !input.protectedVersions.has(version.versionId) && version.versionId !== incoming.versionId)
    .sort((a, b) => a.lastUsedAt - b.lastUsedAt || (a.versionId < b.versionId ? -1 : 1));
  for (const version of evictable) {
    if (fits()) return plan;
    plan.versions.push(version.versionId);
    for (const sha of new Set(version.blobs)) {
      const left = named.get(sha)! - 1;
      named.set(sha, left);
      if (left === 0 && !kept.has(sha) && input.blobs.has(sha)) dropBlob(sha);
    }
  }
  if (fits()) return plan;
  return {
    fits: false,
    message: `cache budget of ${sizeText(input.maxBytes)} cannot hold version ${incoming.versionId} (${sizeText(sum(incoming.blobs.values()))}) beside the versions in use (${sizeText(total - sum(incoming.blobs.values()))})`,
  };
}

function sum(values: Iterable<number>): number {
  let total = 0;
  for (const value of values) total += value;
  return total;
}
