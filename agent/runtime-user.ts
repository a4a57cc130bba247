import { execFile } from 'node:child_process';
import { userInfo } from 'node:os';
import type { AgentPolicy } from './policy.js';

/** Who runtimes run as: `ids` when the agent switches to another user (it runs as root), null when they run as the agent. */
export interface RuntimeUser {
  name: string;
  home: string;
  ids: { uid: number; gid: number } | null;
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

/** `getent <database> <key>`: the system's lookup (files, LDAP, sssd alike); null when the key is unknown (exit 2). */
function getent(database: 'passwd' | 'group', key: string): Promise<string | null> {
  return new Promise((resolve, reject) => {
    execFile('getent', [database, key], { timeout: 10_000, encoding: 'utf8' }, (error, stdout) => {
      if (!error) return resolve(stdout);
      if (error.code === 2) return resolve(null);
      reject(new Error(`getent ${database} ${key} failed: ${error.message}`, { cause: error }));
    });
  });
}

/**
 * Who runtimes run as. An agent running as root switches to the policy's `runAs` user, which must exist and not be
 * root; without one it has no user to run runtimes as (null: every runtime is refused). An agent that is not root
 * cannot switch: its runtimes run as itself.
 */
export async function runtimeUser(policy: AgentPolicy, root: boolean): Promise<RuntimeUser | null> {
  if (!root) {
    const self = userInfo();
    return { name: self.username, home: self.homedir, ids: null };
  }
  if (!policy.runAs) return null;
  const entry = await getent('passwd', policy.runAs.user);
  if (entry === null) throw new Error(`the local policy's runAs user ${policy.runAs.user} does not exist`);
  const user = parsePasswdLine(entry);
  let gid = user.gid;
  if (policy.runAs.group !== undefined) {
    const group = await getent('group', policy.runAs.group);
    if (group === null) throw new Error(`the local policy's runAs group ${policy.runAs.group} does not exist`);
    gid = parseGroupLine(group).gid;
  }
  if (user.uid === 0 || gid === 0) throw new Error(`the local policy's runAs (${policy.runAs.user}) is root: runtimes must run unprivileged`);
  return { name: user.name, home: user.home, ids: { uid: user.uid, gid } };
}
