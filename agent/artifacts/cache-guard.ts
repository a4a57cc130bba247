import { constants, type Stats } from 'node:fs';
import { lstat, open, realpath, stat, type FileHandle } from 'node:fs/promises';
import { dirname } from 'node:path';

/**
 * The agent runs as root and its cache may lie where others can reach it: nothing under the cache dir is followed
 * through a symbolic link, and a cache dir that anyone but the agent can write is refused (docs/agent-cache.md).
 */

/** The agent's own uid; null where the platform has none (nothing to compare owners with). */
const agentUid = (): number | null => process.geteuid?.() ?? null;

const WRITABLE_BY_OTHERS = 0o022;
const STICKY = 0o1000;
const octal = (mode: number) => (mode & 0o7777).toString(8).padStart(4, '0');

/** `path` and the folders above it, `/` last. */
function withAncestors(path: string): string[] {
  const paths = [path];
  for (let up = dirname(path); up !== paths.at(-1); up = dirname(up)) paths.push(up);
  return paths;
}

async function statOrNull(path: string, follow: boolean): Promise<Stats | null> {
  try {
    return follow ? await stat(path) : await lstat(path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw error;
  }
}

/**
 * Why the cache dir cannot be trusted, or null: every folder above it (as named and as resolved) is owned by root
 * or the agent and writable by nobody else unless sticky (so nobody can swap the cache out from under the agent),
 * the cache dir is the agent's and writable by the agent alone, and so are its folders, which are no symbolic
 * links. What does not exist yet is skipped: the agent creates it (0755) and checks again.
 */
export async function cacheDirProblem(dir: string, folders: readonly string[]): Promise<string | null> {
  const uid = agentUid();
  const resolved = await realpath(dir).catch(() => dir);
  const named = new Set(withAncestors(dirname(dir)));
  const above = new Set([...named, ...withAncestors(dirname(resolved))]);
  for (const path of above) {
    const info = await statOrNull(path, true);
    if (!info) continue;
    // The refusal reaches the control plane: a folder only the resolution found (where a link leads) is not named.
    const where = named.has(path) ? `${path}, above the model cache ${dir},` : `a folder above where the model cache ${dir} really lies`;
    if (!info.isDirectory()) return `${where} is not a directory`;
    if (uid !== null && info.uid !== 0 && info.uid !== uid)
      return `${where} belongs to uid ${info.uid}: the folders above the cache must be root's or the agent's`;
    if (info.mode & WRITABLE_BY_OTHERS && !(info.mode & STICKY))
      return `${where} is writable by its group or others without the sticky bit (mode ${octal(info.mode)})`;
  }
  for (const [path, follow] of [[dir, true] as const, ...folders.map((folder) => [folder, false] as const)]) {
    const info = await statOrNull(path, follow);
    if (!info) continue;
    if (info.isSymbolicLink()) return `the model cache ${path} is a symbolic link: the cache dir and its folders must be the agent's own`;
    if (!info.isDirectory()) return `the model cache ${path} is not a directory`;
    if (uid !== null && info.uid !== uid)
      return `the model cache ${path} belongs to uid ${info.uid}, not to the agent (uid ${uid}): the cache dir and its folders must be the agent's own`;
    if (info.mode & WRITABLE_BY_OTHERS)
      return `the model cache ${path} is writable by its group or others (mode ${octal(info.mode & 0o777)}): the cache dir and its folders must be writable by the agent alone`;
  }
  return null;
}

/** A file of the cache that the agent did not write: a prepare meeting one fails, touching nothing through it. */
class ForeignCacheFile extends Error {
  override readonly name = 'ForeignCacheFile';
  constructor(path: string, what: string) {
    super(`the model cache's ${path} ${what}, not a file the agent wrote: refused; remove it`);
  }
}

/**
 * Throws when `info` (of `path`, not followed) is not a file the agent wrote: a symbolic link, anything but a regular
 * file, a file of another owner, or (`singleLink`: a download in progress, which nothing links to) a hard link to
 * a file elsewhere.
 */
export function assertCacheFile(path: string, info: Stats, singleLink: boolean): void {
  const uid = agentUid();
  if (info.isSymbolicLink()) throw new ForeignCacheFile(path, 'is a symbolic link');
  if (!info.isFile()) throw new ForeignCacheFile(path, 'is not a regular file');
  if (uid !== null && info.uid !== uid) throw new ForeignCacheFile(path, `belongs to uid ${info.uid}`);
  if (singleLink && info.nlink !== 1) throw new ForeignCacheFile(path, `has ${info.nlink} links`);
}

/**
 * Opens a file of the cache without following a symbolic link (`O_NOFOLLOW`) nor blocking on a FIFO, and checks
 * the file it got before anything is read or written: `assertCacheFile`. `flags` are `fs.constants` `O_*` flags;
 * never `O_TRUNC` (it would act before the check: truncate the handle instead). Null when there is no such file
 * and `flags` do not create one.
 */
export async function openCacheFile(path: string, flags: number, singleLink: boolean, mode = 0o600): Promise<FileHandle | null> {
  let handle: FileHandle;
  try {
    handle = await open(path, flags | constants.O_NOFOLLOW | constants.O_NONBLOCK, mode);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' && !(flags & constants.O_CREAT)) return null;
    if (code === 'ELOOP') throw new ForeignCacheFile(path, 'is a symbolic link');
    // A FIFO without a reader, opened for writing without blocking.
    if (code === 'ENXIO') throw new ForeignCacheFile(path, 'is not a regular file');
    throw error;
  }
  try {
    assertCacheFile(path, await handle.stat(), singleLink);
    return handle;
  } catch (error) {
    await handle.close();
    throw error;
  }
}
