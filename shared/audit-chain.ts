import { canonicalize, sha256Hex } from './canonical.js';
import type { AuditEntry, AuditEntryFields, ChainVerdict } from './contracts/audit.js';

export type { AuditEntry, AuditEntryFields, ChainVerdict } from './contracts/audit.js';

/** Hash of the first entry's `prevHash` in a workspace's chain. */
export const CHAIN_START = '';
/**
 * `hash` of entries written before the chain existed: accepted only before the first chained entry. Kept for good:
 * chaining such a row would rewrite it, which the append-only trigger refuses (test/integration/audit.test.ts).
 */
export const LEGACY_HASH = 'legacy';

/** The entry's hash: SHA-256 (hex) of the RFC 8785 canonical JSON of its fields, `prevHash` included. */
export async function auditHash(fields: AuditEntryFields): Promise<string> {
  const { id, workspaceId, seq, at, actor, action, target, outcome, details, prevHash } = fields;
  return await sha256Hex(canonicalize({ id, workspaceId, seq, at, actor, action, target, outcome, details, prevHash }));
}

/**
 * Verifies one workspace's chain entry by entry, in `seq` order from its first, holding nothing but the last
 * hash: a chain of any length is checked as it is read, a batch at a time. Each entry must come next in `seq`,
 * belong to the same workspace, link to the previous entry's hash and match its own; legacy entries (from before
 * the chain) only before the first chained one. The first entry that does not hold breaks the chain; later
 * entries change nothing.
 */
export class ChainVerifier {
  private entries = 0;
  private legacy = 0;
  private prev = CHAIN_START;
  private chained = false;
  private workspaceId: string | null = null;
  private broken: Extract<ChainVerdict, { ok: false }> | null = null;

  /** Checks the next entry; false once the chain is broken. */
  async push(entry: AuditEntry): Promise<boolean> {
    if (this.broken) return false;
    this.entries += 1;
    const reason = await this.fault(entry);
    if (reason === null) return true;
    this.broken = { ok: false, entries: this.entries, legacy: this.legacy, brokenAt: { seq: entry.seq, id: entry.id }, reason };
    return false;
  }

  verdict(): ChainVerdict {
    return this.broken ?? { ok: true, entries: this.entries, legacy: this.legacy, head: this.prev };
  }

  /** What is wrong with `entry` as the next of the chain, or null (and the chain moves on to it). */
  private async fault(entry: AuditEntry): Promise<string | null> {
    if (entry.seq !== this.entries) return `expected seq ${this.entries}, found ${entry.seq}: an entry is missing or out of order`;
    this.workspaceId ??= entry.workspaceId;
    if (entry.workspaceId !== this.workspaceId) return `an entry of workspace ${entry.workspaceId} in the chain of ${this.workspaceId}`;
    if (entry.hash === LEGACY_HASH) {
      if (this.chained) return 'an unchained entry after the chain began';
      this.legacy += 1;
      return null;
    }
    this.chained = true;
    if (entry.prevHash !== this.prev) return 'prevHash does not match the previous entry: an entry was removed, inserted or rewritten';
    if ((await auditHash(entry)) !== entry.hash) return 'the hash does not match the entry: it was edited';
    this.prev = entry.hash;
    return null;
  }
}

/**
 * Verifies a workspace's entries, in `seq` order, from its first: an export read back (an array), or the rows
 * read from the store a batch at a time (an async iterable), which is read no further than the first break.
 */
export async function verifyChain(entries: Iterable<AuditEntry> | AsyncIterable<AuditEntry>): Promise<ChainVerdict> {
  const verifier = new ChainVerifier();
  for await (const entry of entries) if (!(await verifier.push(entry))) break;
  return verifier.verdict();
}
