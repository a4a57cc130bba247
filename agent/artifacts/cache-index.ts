import { constants } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { z } from 'zod';
import { writeFileAtomic } from '../state.js';

const Sha256 = z.string().regex(/^[0-9a-f]{64}$/);

const IndexEntry = z.object({
  /** Epoch ms of the last prepare that used it. */
  lastUsedAt: z.number(),
  /** The version's files as it was fetched: its folder is rebuilt from them, its blobs are known by them. */
  files: z.array(z.object({ path: z.string(), sha256: Sha256, size: z.number().int().nonnegative() })),
  /** Every file verified and linked into its folder. */
  complete: z.boolean(),
});

/** The cache's own record of what it holds and when each version and blob was last used (`index.json`). */
export const CacheIndex = z.object({
  versions: z.record(z.string(), IndexEntry),
  blobs: z.record(Sha256, z.object({ lastUsedAt: z.number() })),
});
export type CacheIndex = z.infer<typeof CacheIndex>;

/**
 * The index at `path`; an empty one when there is none. One that cannot be read as an index (written by another
 * agent version) is started afresh: its blobs become orphans that eviction reclaims, its versions are fetched
 * again when asked for, and `onUnreadable` says so.
 */
export async function loadIndex(path: string, onUnreadable: (reason: string) => void): Promise<CacheIndex> {
  let text: string;
  try {
    // Never read through a link: the agent (root) would read any file of the node, and tell of it in its log.
    text = await readFile(path, { encoding: 'utf8', flag: constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return { versions: {}, blobs: {} };
    if (code === 'ELOOP') {
      // Saving the index replaces the link itself.
      onUnreadable(`${path} is a symbolic link`);
      return { versions: {}, blobs: {} };
    }
    throw error;
  }
  let json: unknown = null;
  try {
    json = JSON.parse(text);
  } catch {
    // Refused by the schema below.
  }
  const parsed = CacheIndex.safeParse(json);
  if (parsed.success) return parsed.data;
  onUnreadable(parsed.error.issues[0]?.message ?? 'unreadable');
  return { versions: {}, blobs: {} };
}

/** Writes the index atomically: a crash leaves the old one or the new one, never half of one. */
export async function saveIndex(path: string, index: CacheIndex): Promise<void> {
  await writeFileAtomic(path, JSON.stringify(index));
}

/** Up to `limit` versions verified and materialised, the most recently used ones, sorted by id. Pure. */
export function cachedVersionIds(index: CacheIndex, limit: number): string[] {
  return Object.entries(index.versions)
    .filter(([, entry]) => entry.complete)
    .sort(([a, x], [b, y]) => y.lastUsedAt - x.lastUsedAt || (a < b ? -1 : 1))
    .slice(0, limit)
    .map(([id]) => id)
    .sort();
}
