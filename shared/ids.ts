import { encodeTime } from 'ulid';

/** Prefixes of every id the control plane mints (docs/design.md section 2). */
export const ID_PREFIXES = {
  workspace: 'ws',
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
  audit: 'aud',
  event: 'evt',
  connection: 'con',
  uplink: 'upl',
  instance: 'ins',
  cluster: 'cls',
} as const;

export type IdKind = keyof typeof ID_PREFIXES;

const CROCKFORD = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';

/**
 * A ULID: 48-bit millisecond time then 80 random bits (16 characters), Crockford base32. The random part comes
 * from one draw (the `ulid` package draws once per character, which shows up on the request hot path); the low
 * 5 bits of a uniform byte are uniform, as 256 is a multiple of 32.
 */
function ulid(): string {
  let random = '';
  for (const byte of crypto.getRandomValues(new Uint8Array(16))) random += CROCKFORD[byte & 31];
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
