import { chmod, chown, lchown, lstat, mkdir, readdir, readFile, rmdir, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import type { UidRange } from '../runtime-user.js';

/**
 * The uids live processes run as (real, effective, saved and file-system), from /proc: a runtime's worker that
 * outlived it, or one an earlier agent left running, still holds its uid. A zombie runs nothing.
 */
export async function uidsInUse(): Promise<Set<number>> {
  const used = new Set<number>();
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let status: string;
    try {
      status = await readFile(`/proc/${entry}/status`, 'utf8');
    } catch {
      // Gone while we looked.
      continue;
    }
    if (/^State:\s+Z/m.test(status)) continue;
    const ids = /^Uid:\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)/m.exec(status);
    for (const id of ids?.slice(1) ?? []) used.add(Number(id));
  }
  return used;
}

/** The lowest uid of `range` that is in neither set, or null when there is none. Pure. */
export function lowestFreeUid(range: UidRange, held: ReadonlySet<number>, used: ReadonlySet<number>): number | null {
  for (let uid = range.first; uid < range.first + range.count; uid++) if (!held.has(uid) && !used.has(uid)) return uid;
  return null;
}

/**
 * Removes a tree a runtime's uid owned. Each folder is made the agent's before it is entered: root without
 * CAP_DAC_OVERRIDE (as the systemd unit runs the agent) cannot enter another user's 0700 folder, but may take it
 * over (CAP_CHOWN). Anything else is unlinked, never followed nor taken over (a hard link to a file elsewhere stays
 * that file's). Nothing changes the tree meanwhile: no process runs as its uid.
 */
async function removeRuntimeTree(path: string): Promise<void> {
  let info;
  try {
    info = await lstat(path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw error;
  }
  if (!info.isDirectory()) return await unlink(path);
  await lchown(path, process.geteuid!(), process.getegid!());
  await chmod(path, 0o700);
  for (const name of await readdir(path)) await removeRuntimeTree(join(path, name));
  await rmdir(path);
}

/**
 * A new, empty home for `uid` in `homes` (the state dir's, 0710 and the runtimes' group): its own and 0700. What a
 * runtime that had the uid before left there is removed first.
 */
export async function freshHome(homes: string, uid: number, gid: number): Promise<string> {
  const home = join(homes, String(uid));
  await removeRuntimeTree(home);
  await mkdir(home, { mode: 0o700 });
  await chown(home, uid, gid);
  return home;
}
