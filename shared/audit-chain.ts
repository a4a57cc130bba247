import { canonicalize, sha256Hex } from './canonical.js';

/** The fields of an audit entry its hash covers: everything but the hash itself. */
export interface AuditEntryFields {
  id: string;
  workspaceId: string;
  seq: number;
  at: string;
  actor: string;
  action: string;
  target: string;
  outcome: string;
  details: Record<string, unknown>;
  prevHash: string;
}

export interface AuditEntry extends AuditEntryFields {
  hash: string;
}

/** Hash of the first entry's `prevHash` in a workspace's chain. */
export const CHAIN_START = '';
/** `hash` of entries written before the chain existed: accepted only before the first chained entry. */
export const LEGACY_HASH = 'legacy';

/** The entry's hash: SHA-256 (hex) of the RFC 8785 canonical JSON of its fields, `prevHash` included. */
export async function auditHash(fields: AuditEntryFields): Promise<string> {
  const { id, workspaceId, seq, at, actor, action, target, outcome, details, prevHash } = fields;
  return await sha256Hex(canonicalize({ id, workspaceId, seq, at, actor, action, target, outcome, details, prevHash }));
}

export type ChainVerdict =
  | { ok: true; entries: number; legacy: number; head: string }
  | { ok: false; entries: number; legacy: number; brokenAt: { seq: number; id: string }; reason: string };

/**
 * Verifies one workspace's entries, in `seq` order, from its first: each links to the previous entry's hash,
 * seq counts up by one, and each hash matches its fields. Pure: the CLI runs it on an export, the server on
 * its own rows.
 */
export async function verifyChain(entries: readonly AuditEntry[]): Promise<ChainVerdict> {
  let prev = CHAIN_START;
  let legacy = 0;
  let chained = false;
  for (const [index, entry] of entries.entries()) {
    const broken = (reason: string): ChainVerdict => ({ ok: false, entries: entries.length, legacy, brokenAt: { seq: entry.seq, id: entry.id }, reason });
    if (entry.seq !== index + 1) return broken(`expected seq ${index + 1}, found ${entry.seq}: an entry is missing or out of order`);
    if (entry.hash === LEGACY_HASH && !chained) {
      legacy += 1;
      continue;
    }
    if (entry.hash === LEGACY_HASH) return broken('an unchained entry after the chain began');
    chained = true;
    if (entry.prevHash !== prev) return broken('prevHash does not match the previous entry: an entry was removed, inserted or rewritten');
    if ((await auditHash(entry)) !== entry.hash) return broken('the hash does not match the entry: it was edited');
    prev = entry.hash;
  }
  return { ok: true, entries: entries.length, legacy, head: prev };
}
