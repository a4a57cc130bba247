import { resolve } from 'node:path';
import type { CryptoKey } from 'jose';
import type { Log } from './log.js';
import { allowsNothing } from './policy.js';
import { loadPolicy, type LoadedPolicy, type PolicySource } from './policy-file.js';
import { describeRuntimeUsers, inUidRange, runtimeUsers, type RuntimeUsers } from './runtime-user.js';
import { loadHeldGen, loadIdentity, loadKey, secureStateDir, type AgentIdentity } from './state.js';

/** What `run` starts from: the enrolled identity and key, the local policy and whom runtimes run as. */
export interface RunStart {
  stateDir: string;
  identity: AgentIdentity;
  key: CryptoKey;
  loaded: LoadedPolicy;
  users: RuntimeUsers | null;
  /** The desired-state generation this machine last held. */
  heldGen: number;
}

/** Says once, at start, what the local policy lets run here and as whom; above all when that is nothing. */
function logPolicy(log: Log, loaded: LoadedPolicy, root: boolean, users: RuntimeUsers | null): void {
  const { policy } = loaded;
  log('local policy', {
    path: loaded.path,
    found: loaded.found,
    templates: Object.keys(policy.templates),
    simulated: policy.simulated,
    artifactRoots: policy.artifactRoots,
    runtimeUser: users ? describeRuntimeUsers(users) : null,
  });
  if (!loaded.found)
    log('nothing will run on this node', {
      reason: `no local policy at ${loaded.path}: without one the agent accepts no runtime template and not the simulated runtime`,
    });
  else if (allowsNothing(policy))
    log('nothing will run on this node', { reason: `the local policy ${loaded.path} allows no runtime template and not the simulated runtime` });
  else if (!users) log('nothing will run on this node', { reason: 'the agent runs as root and the local policy names no runAs user to run runtimes as' });
  else if (!root)
    log("runtimes run as this agent's own user", {
      user: describeRuntimeUsers(users),
      reason: 'not root, the agent cannot switch users: its runtimes can read its state dir and key',
    });
  else if (users.kind === 'one')
    log('runtimes share one user', {
      user: users.user.name,
      reason: 'each can read the environment (its secrets) of the others and signal them: give runAs a range of uids instead',
    });
}

/** Reads what `run` starts from, keeps the state dir private (from the runtime user too) and logs the policy. */
export async function prepareRun(opts: { stateDir: string; policy: PolicySource; log: Log }): Promise<RunStart> {
  const stateDir = resolve(opts.stateDir);
  const identity = await loadIdentity(stateDir);
  if (!identity) throw new Error(`${stateDir} holds no identity: run \`lunanexa-agent enroll\` first`);
  const loaded = await loadPolicy(opts.policy);
  const root = process.getuid?.() === 0;
  const users = await runtimeUsers(loaded.policy, root);
  const loosened = await secureStateDir(
    stateDir,
    users?.kind === 'range'
      ? { runtimeUid: (uid) => inUidRange(users.uids, uid), group: users.gid }
      : { runtimeUid: (uid) => uid === users?.user.ids?.uid, group: null },
  );
  if (loosened.length > 0) opts.log('state dir made private again', { paths: loosened });
  logPolicy(opts.log, loaded, root, users);
  return { stateDir, identity, key: await loadKey(stateDir), loaded, users, heldGen: await loadHeldGen(stateDir) };
}
