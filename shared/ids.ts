import { ulid } from 'ulid';

/** Prefixes of every id the control plane mints (DESIGN.md section 2). */
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
  connection: 'con',
  instance: 'ins',
  cluster: 'cls',
} as const;

export type IdKind = keyof typeof ID_PREFIXES;

/** A new prefixed ULID, e.g. `newId('machine')` -> `mch_01J...`. */
export function newId(kind: IdKind): string {
  return `${ID_PREFIXES[kind]}_${ulid()}`;
}

/** True when `id` looks like an id of `kind` (prefix and 26 Crockford base32 characters). */
export function isId(kind: IdKind, id: string): boolean {
  return new RegExp(`^${ID_PREFIXES[kind]}_[0-9A-HJKMNP-TV-Z]{26}$`).test(id);
}
