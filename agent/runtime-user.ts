import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { userInfo } from 'node:os';
import type { AgentPolicy } from './policy.js';

/** The uid and gid a runtime runs as, when the agent (root) switches users for it. */
export interface RuntimeIds {
  uid: number;
  gid: number;
}

/** Who one runtime runs as: `ids` when the agent switches to another user (it runs as root), null when it runs as the agent. */
export interface RuntimeUser {
  name: string;
  home: string;
  ids: RuntimeIds | null;
}

/** `count` uids from `first`. */
export interface UidRange {
  first: number;
  count: number;
}

/**
 * Whom the agent's runtimes run as: one user for all of them (the agent itself when it is not root, or the policy's
 * `runAs.user`), or each a uid of the policy's `runAs.uids` of its own, all in group `gid`.
 */
export type RuntimeUsers = { kind: 'one'; user: RuntimeUser } | { kind: 'range'; uids: UidRange; gid: number };

export const inUidRange = (range: UidRange, uid: number): boolean => uid >= range.first && uid < range.first + range.count;

/** What the agent's start log says runtimes run as. Pure. */
export function describeRuntimeUsers(users: RuntimeUsers): string {
  if (users.kind === 'one') return users.user.name;
  return `a uid of ${users.uids.first}-${users.uids.first + users.uids.count - 1} each, group ${users.gid}`;
}

/** One `passwd` database line (`name:x:uid:gid:gecos:home:shell`). Pure. */
export function parsePasswdLine(line: string): { name: string; uid: number; gid: number; home: string } {
  const fields = line.trim().split(':');
  const [name, , uid, gid, , home] = fields;
  if (fields.length < 7 || !name || !/^\d+$/.test(uid ?? '') || !/^\d+$/.test(gid ?? '') || !home) throw new Error(`unexpected passwd entry: ${line.trim()}`);
  return { name, uid: Number(uid), gid: Number(gid), home };
}

/** One `group` database line (`name:x:gid:members`). Pure. */
export function parseGroupLine(line: string): { name: string; gid: number } {
  const fields = line.trim().split(':');
  const [name, , gid] = fields;
  if (fields.length < 4 || !name || !/^\d+$/.test(gid ?? '')) throw new Error(`unexpected group entry: ${line.trim()}`);
  return { name, gid: Number(gid) };
}

/**
 * `getent <database> <keys...>`: the entries the system knows (files, LDAP, sssd alike), '' when it knows none of
 * them (exit 2: one key or more is unknown).
 */
function getent(database: 'passwd' | 'group', keys: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile('getent', [database, ...keys], { timeout: 30_000, encoding: 'utf8', maxBuffer: 16 * 1024 ** 2 }, (error, stdout) => {
      if (!error || error.code === 2) return resolve(stdout);
      reject(new Error(`getent ${database} failed: ${error.message}`, { cause: error }));
    });
  });
}

/** Uids looked up per `getent` call: well within any argv limit. */
const GETENT_BATCH = 512;

/** The subordinate ranges of /etc/subuid (`name:first:count`) that overlap `range`: another user's containers run as those. */
async function subordinateOverlaps(range: UidRange): Promise<string[]> {
  let text: string;
  try {
    text = await readFile('/etc/subuid', 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw error;
  }
  return text
    .split('\n')
    .map((line) => line.trim().split(':'))
    .filter(([name, first, count]) => name && /^\d+$/.test(first ?? '') && /^\d+$/.test(count ?? ''))
    .filter(([, first, count]) => Number(first) < range.first + range.count && range.first < Number(first) + Number(count))
    .map(([name, first, count]) => `${name}'s subordinate uids ${first}-${Number(first) + Number(count) - 1} (/etc/subuid)`);
}

/**
 * Why `range` is not the agent's own to hand out, or null: a uid of it is 0 or belongs to an account the system knows
 * (`getent passwd <uid>`), or to another user's subordinate ids. A runtime given such a uid would share it with that
 * account's processes, which could then read its environment and signal it.
 */
export async function uidRangeProblem(range: UidRange): Promise<string | null> {
  if (range.first <= 0) return 'it holds uid 0 (root)';
  const taken: string[] = [];
  for (let from = range.first; from < range.first + range.count && taken.length === 0; from += GETENT_BATCH) {
    const keys = Array.from({ length: Math.min(GETENT_BATCH, range.first + range.count - from) }, (_, i) => String(from + i));
    for (const line of (await getent('passwd', keys)).split('\n').filter((l) => l.trim() !== '')) {
      const account = parsePasswdLine(line);
      taken.push(`uid ${account.uid} is ${account.name}'s`);
    }
  }
  taken.push(...(await subordinateOverlaps(range)));
  return taken.length === 0 ? null : `${taken.slice(0, 3).join('; ')}${taken.length > 3 ? '; …' : ''}`;
}

/** The gid of the policy's group: a gid as it is (it needs no entry), a name as the system resolves it. */
async function groupId(group: string | number): Promise<number> {
  if (typeof group === 'number') return group;
  const entry = await getent('group', [group]);
  if (entry === '') throw new Error(`the local policy's runAs group ${group} does not exist`);
  return parseGroupLine(entry).gid;
}

/**
 * Whom runtimes run as. An agent running as root switches to the policy's `runAs`: each runtime a uid of its range
 * (refused unless the whole range is the agent's own), or its one user, which must exist and not be root; without
 * one it has no user to run runtimes as (null: every runtime is refused). An agent that is not root cannot switch:
 * its runtimes run as itself.
 */
export async function runtimeUsers(policy: AgentPolicy, root: boolean): Promise<RuntimeUsers | null> {
  if (!root) {
    const self = userInfo();
    return { kind: 'one', user: { name: self.username, home: self.homedir, ids: null } };
  }
  const runAs = policy.runAs;
  if (!runAs) return null;
  if (runAs.uids) {
    const { first, count } = runAs.uids;
    const problem = await uidRangeProblem(runAs.uids);
    if (problem !== null) throw new Error(`the local policy's runAs uids ${first}-${first + count - 1} are not the agent's own: ${problem}`);
    const gid = await groupId(runAs.group!);
    if (gid === 0) throw new Error(`the local policy's runAs group ${runAs.group} is root's: runtimes must run unprivileged`);
    return { kind: 'range', uids: runAs.uids, gid };
  }
  const name = runAs.user!;
  const entry = await getent('passwd', [name]);
  if (entry === '') throw new Error(`the local policy's runAs user ${name} does not exist`);
  const user = parsePasswdLine(entry);
  const gid = runAs.group === undefined ? user.gid : await groupId(runAs.group);
  if (user.uid === 0 || gid === 0) throw new Error(`the local policy's runAs (${name}) is root: runtimes must run unprivileged`);
  return { kind: 'one', user: { name: user.name, home: user.home, ids: { uid: user.uid, gid } } };
}
