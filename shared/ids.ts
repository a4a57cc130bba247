import { encodeTime } from 'ulid';

/** Prefixes of every id the control plane mints (docs/design.md section 2). */
const ID_PREFIXES = {
  workspace: 'ws',
  member: 'mem',
  token: 'tok',
  enrollment: 'enr',
  machine: 'mch',
  credential: 'crd',
  deployment: 'dep',
  assignment: 'asg',
  workload: 'wkl',
  invocation: 'inv',
  model: 'mdl',
  modelVersion: 'mv',
  job: 'job',
  run: 'run',
  worker: 'wrk',
  audit: 'aud',
  event: 'evt',
  connection: 'con',
  uplink: 'upl',
  instance: 'ins',
  cluster: 'cls',
  consoleSession: 'ses',
  file: 'file',
  swarm: 'swm',
} as const;

export type IdKind = keyof typeof ID_PREFIXES;

const CROCKFORD = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';

/** Random bytes drawn in bulk: one draw per 256 ids, not one per id (each draw crosses into the crypto library). */
const POOL_BYTES = 4096;
let pool = new Uint8Array(0);
let poolAt = POOL_BYTES;

/**
 * A ULID: 48-bit millisecond time then 80 random bits (16 characters), Crockford base32. The random part comes
 * from a pool of cryptographic random bytes (the `ulid` package draws once per character, and a draw per id
 * still showed on the request hot path); the low 5 bits of a uniform byte are uniform, as 256 is a multiple of 32.
 */
function ulid(): string {
  if (poolAt + 16 > POOL_BYTES) {
    pool = crypto.getRandomValues(new Uint8Array(POOL_BYTES));
    poolAt = 0;
  }
  let random = '';
  for (let i = poolAt; i < poolAt + 16; i += 1) random += CROCKFORD[pool[i]! & 31];
  poolAt += 16;
  return encodeTime(Date.now(), 10) + random;
}

/** A new prefixed ULID, e.g. `newId('machine')` -> `mch_01J...`. */
export function newId(kind: IdKind): string {
  return `${ID_PREFIXES[kind]}_${ulid()}`;
}

/** True when `id` looks like an id of `kind` (prefix and 26 Crockford base32 characters). */
export function isId(kind: IdKind, id: string): boolean {
  return new RegExp(`^${ID_PREFIXES[kind]}_[0-9A-HJKMNP-TV-Z]{26}$`).test(id);
}
