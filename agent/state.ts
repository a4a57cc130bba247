import { randomUUID } from 'node:crypto';
import { chmod, chown, lstat, mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { exportJWK, generateKeyPair, importJWK, type CryptoKey, type JWK } from 'jose';
import { Jwks, type Ed25519PublicJwk } from '../shared/contracts/enrollment.js';

/** What an enrolled agent knows about itself; the private key lives beside it in its own 0600 file. */
export const AgentIdentity = z.object({
  url: z.string().url(),
  name: z.string(),
  machineId: z.string(),
  workspaceId: z.string(),
  clusterId: z.string(),
  credentialId: z.string(),
  credentialIssuedAt: z.string(),
  credentialExpiresAt: z.string(),
  /** The control plane's keys, pinned at enrollment: desired states signed by anything else are refused. */
  jwks: Jwks,
  heartbeatIntervalMs: z.number().int().positive(),
});
export type AgentIdentity = z.infer<typeof AgentIdentity>;

const IDENTITY_FILE = 'identity.json';
const KEY_FILE = 'machine-key.jwk';
const NEXT_KEY_FILE = 'machine-key.next.jwk';

/**
 * Writes a file atomically (temp + rename) with the given mode. The temporary name is unique per write: two
 * writes of the same file racing in one process (two desired states a millisecond apart) must not rename each
 * other's temporary file away.
 */
export async function writeFileAtomic(path: string, text: string | Uint8Array, mode = 0o600): Promise<void> {
  const temp = `${path}.${process.pid}.${randomUUID()}.tmp`;
  try {
    // 'wx': a new file, never one that a link or an earlier file at that name leads to.
    await writeFile(temp, text, { mode, flag: 'wx' });
    await rename(temp, path);
  } catch (error) {
    // A full disk or a vanished directory must not leave temporaries behind; the caller gets the cause.
    await rm(temp, { force: true });
    throw error;
  }
}

/** Creates the state dir and its runtimes dir, private to the agent (an existing dir is made private too). */
export async function ensureStateDir(dir: string): Promise<void> {
  await mkdir(join(dir, 'runtimes'), { recursive: true, mode: 0o700 });
  await chmod(dir, 0o700);
  await chmod(join(dir, 'runtimes'), 0o700);
}

/** Where runtimes of a uid range get their homes: `<state dir>/homes/<uid>`. */
export const homesDir = (dir: string) => join(dir, 'homes');

/**
 * Whom the state dir must keep out: `runtimeUid` tells a uid that runtimes run as; `group`, set when each runtime
 * has a uid of its own, is their one group, which may pass through the state dir (0710) to their homes in it.
 */
interface StateDirAccess {
  runtimeUid: (uid: number) => boolean;
  group: number | null;
}

/**
 * Makes the state dir private again before anything runs: the dir and its runtimes dir 0700, the key files and
 * the identity 0600, whatever a copy, a restore or an older version left (returns the paths it changed). With a
 * runtime group, the dir and its homes dir (created if missing) are 0710 and that group's: runtimes pass through to
 * their own homes and list nothing. Refuses a state dir a runtime user owns (a mode keeps nobody out of their own
 * files) and one whose entries are symbolic links (a mode change would land elsewhere).
 */
export async function secureStateDir(dir: string, access: StateDirAccess): Promise<string[]> {
  const fixed: string[] = [];
  const passable = access.group === null ? 0o700 : 0o710;
  if (access.group !== null) await mkdir(homesDir(dir), { recursive: true, mode: 0o710 });
  const entries: Array<[string, number]> = [
    [dir, passable],
    [join(dir, 'runtimes'), 0o700],
    [homesDir(dir), passable],
    [join(dir, KEY_FILE), 0o600],
    [join(dir, NEXT_KEY_FILE), 0o600],
    [join(dir, IDENTITY_FILE), 0o600],
  ];
  for (const [path, mode] of entries) {
    let info;
    try {
      info = await lstat(path);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') continue;
      throw error;
    }
    if (info.isSymbolicLink()) throw new Error(`${path} is a symbolic link: the state dir must hold its own files`);
    if (access.runtimeUid(info.uid)) throw new Error(`${path} belongs to a runtime user (uid ${info.uid}): runtimes could read the machine key`);
    const regroup = mode === 0o710 && access.group !== null && info.gid !== access.group;
    if (regroup) await chown(path, info.uid, access.group!);
    const remode = (info.mode & 0o777) !== mode;
    if (remode) await chmod(path, mode);
    if (regroup || remode) fixed.push(path);
  }
  return fixed;
}

/** A new Ed25519 key pair, generated locally; only the public half ever leaves the machine. */
export async function generateMachineKey(): Promise<{ privateKey: CryptoKey; publicJwk: Ed25519PublicJwk; privateJwk: JWK }> {
  const { publicKey, privateKey } = await generateKeyPair('EdDSA', { crv: 'Ed25519', extractable: true });
  const pub = await exportJWK(publicKey);
  return { privateKey, publicJwk: { kty: 'OKP', crv: 'Ed25519', x: pub.x! }, privateJwk: await exportJWK(privateKey) };
}

export async function saveKey(dir: string, privateJwk: JWK, next = false): Promise<void> {
  await writeFileAtomic(join(dir, next ? NEXT_KEY_FILE : KEY_FILE), JSON.stringify(privateJwk));
}

/** Promotes the rotated key to the current one (after the control plane accepted it). */
export async function promoteNextKey(dir: string): Promise<void> {
  await rename(join(dir, NEXT_KEY_FILE), join(dir, KEY_FILE));
}

export async function loadKey(dir: string): Promise<CryptoKey> {
  const jwk = JSON.parse(await readFile(join(dir, KEY_FILE), 'utf8')) as JWK;
  return (await importJWK(jwk, 'EdDSA')) as CryptoKey;
}

export async function saveIdentity(dir: string, identity: AgentIdentity): Promise<void> {
  await writeFileAtomic(join(dir, IDENTITY_FILE), JSON.stringify(identity, null, 2));
}

/** The enrolled identity, or null when this state dir has not enrolled. */
export async function loadIdentity(dir: string): Promise<AgentIdentity | null> {
  let text: string;
  try {
    text = await readFile(join(dir, IDENTITY_FILE), 'utf8');
  } catch {
    return null;
  }
  return AgentIdentity.parse(JSON.parse(text));
}

/** The newest desired-state generation this machine accepted, kept across restarts so it never goes back. */
export async function loadHeldGen(dir: string): Promise<number> {
  try {
    return z.object({ gen: z.number().int() }).parse(JSON.parse(await readFile(join(dir, 'desired-gen.json'), 'utf8'))).gen;
  } catch {
    return 0;
  }
}

export async function saveHeldGen(dir: string, gen: number): Promise<void> {
  await writeFileAtomic(join(dir, 'desired-gen.json'), JSON.stringify({ gen }));
}
