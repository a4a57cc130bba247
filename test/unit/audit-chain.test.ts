import { describe, expect, it } from 'vitest';
import { auditHash, CHAIN_START, ChainVerifier, LEGACY_HASH, verifyChain, type AuditEntry } from '../../shared/audit-chain.js';

/**
 * The audit log's hash chain (shared/audit-chain.ts): an intact chain verifies, and every edit, removal,
 * insertion or reordering breaks it at the first entry that no longer holds, named by its seq. Legacy entries
 * (from before the chain) are accepted only as a prefix.
 */

const WORKSPACE = 'wsp_01JAUDITCHAIN000000000000';

/** A chain of `n` entries, the first `legacy` of them from before the chain existed, hashed as the writer does. */
async function chain(n: number, legacy = 0): Promise<AuditEntry[]> {
  const entries: AuditEntry[] = [];
  let prevHash = CHAIN_START;
  for (let seq = 1; seq <= n; seq += 1) {
    const fields = {
      id: `aud_${String(seq).padStart(4, '0')}`,
      workspaceId: WORKSPACE,
      seq,
      at: new Date(Date.UTC(2026, 0, 1, 0, 0, seq)).toISOString(),
      actor: seq % 2 ? 'tok_admin' : 'system',
      action: seq % 3 ? 'deployment.update' : 'machine.revoke',
      target: `dep_${seq}`,
      outcome: 'succeeded',
      details: { generation: seq, labels: { zone: 'a', rack: String(seq) }, note: null },
      prevHash: seq <= legacy ? '' : prevHash,
    };
    if (seq <= legacy) {
      entries.push({ ...fields, hash: LEGACY_HASH });
      continue;
    }
    const hash = await auditHash(fields);
    entries.push({ ...fields, hash });
    prevHash = hash;
  }
  return entries;
}

/** The entry as rewritten by someone who could also recompute its hash (but not every later entry's). */
async function rehashed(entry: AuditEntry): Promise<AuditEntry> {
  return { ...entry, hash: await auditHash(entry) };
}

const brokenAt = (seq: number, reason: RegExp) => ({ ok: false, brokenAt: { seq, id: expect.any(String) }, reason: expect.stringMatching(reason) });

describe('verifyChain', () => {
  it('accepts an intact chain, and names its head', async () => {
    const entries = await chain(6);
    expect(await verifyChain(entries)).toEqual({ ok: true, entries: 6, legacy: 0, head: entries[5]!.hash });
  });

  it('accepts an empty chain', async () => {
    expect(await verifyChain([])).toEqual({ ok: true, entries: 0, legacy: 0, head: CHAIN_START });
  });

  it('accepts the chain as exported and read back (JSON), details with their keys in another order', async () => {
    const entries = (JSON.parse(JSON.stringify(await chain(4))) as AuditEntry[]).map((entry) => ({
      ...entry,
      // jsonb keeps keys in its own order: the hash covers the canonical form.
      details: Object.fromEntries(Object.entries(entry.details).reverse()),
    }));
    expect(await verifyChain(entries)).toMatchObject({ ok: true, entries: 4 });
  });

  it('detects an edited field, whichever it is', async () => {
    const edits: Array<Partial<AuditEntry>> = [
      { actor: 'tok_someone_else' },
      { action: 'deployment.delete' },
      { target: 'dep_other' },
      { outcome: 'denied' },
      { at: '2027-01-01T00:00:00.000Z' },
      { id: 'aud_forged' },
    ];
    for (const edit of edits) {
      const entries = await chain(5);
      entries[2] = { ...entries[2]!, ...edit };
      expect(await verifyChain(entries), JSON.stringify(edit)).toMatchObject(brokenAt(3, /edited/));
    }
  });

  it('detects edited details: a changed value, an added key, a removed key', async () => {
    const edits = [
      (d: Record<string, unknown>) => ({ ...d, generation: 99 }),
      (d: Record<string, unknown>) => ({ ...d, labels: { zone: 'b', rack: '2' } }),
      (d: Record<string, unknown>) => ({ ...d, extra: true }),
      ({ note: _note, ...d }: Record<string, unknown>) => d,
    ];
    for (const edit of edits) {
      const entries = await chain(4);
      entries[1] = { ...entries[1]!, details: edit(entries[1]!.details) };
      expect(await verifyChain(entries)).toMatchObject(brokenAt(2, /edited/));
    }
  });

  it('detects an entry rewritten with its hash recomputed, at the entry after it', async () => {
    const entries = await chain(5);
    entries[1] = await rehashed({ ...entries[1]!, details: { generation: 2, forged: true } });
    expect(await verifyChain(entries)).toMatchObject(brokenAt(3, /prevHash/));
  });

  it('detects a removed entry: first, in the middle, and when the later ones are renumbered', async () => {
    const first = await chain(4);
    expect(await verifyChain(first.slice(1))).toMatchObject(brokenAt(2, /expected seq 1/));

    const middle = await chain(5);
    middle.splice(2, 1);
    expect(await verifyChain(middle)).toMatchObject(brokenAt(4, /expected seq 3, found 4/));

    const renumbered = (await chain(5)).filter((e) => e.seq !== 3).map((e, i) => ({ ...e, seq: i + 1 }));
    // The entry now at seq 3 links to the removed one.
    expect(await verifyChain(renumbered)).toMatchObject(brokenAt(3, /prevHash/));
    // Linked to the entry before it instead: its hash no longer matches what it says.
    renumbered[2] = { ...renumbered[2]!, prevHash: renumbered[1]!.hash };
    expect(await verifyChain(renumbered)).toMatchObject(brokenAt(3, /edited/));
    // And rehashed: the entry after it no longer links to it.
    renumbered[2] = await rehashed(renumbered[2]!);
    expect(await verifyChain(renumbered)).toMatchObject(brokenAt(4, /prevHash/));
  });

  it('tells a chain cut short only by its head and count: keep the head elsewhere', async () => {
    const entries = await chain(5);
    const verdict = await verifyChain(entries.slice(0, 4));
    expect(verdict).toEqual({ ok: true, entries: 4, legacy: 0, head: entries[3]!.hash });
    expect(verdict.ok && verdict.head).not.toBe(entries[4]!.hash);
  });

  it('detects an inserted entry, even one that links to the entry before it', async () => {
    const entries = await chain(4);
    const forged = await rehashed({ ...entries[1]!, id: 'aud_forged', seq: 3, prevHash: entries[1]!.hash, action: 'api_token.create' });
    const inserted = [...entries.slice(0, 2), forged, ...entries.slice(2)];
    // The entry that was third follows it under its old seq.
    expect(await verifyChain(inserted)).toMatchObject(brokenAt(3, /expected seq 4, found 3/));
    // Renumbered after it: it no longer links to the forged one.
    const renumbered = inserted.map((e, i) => ({ ...e, seq: i + 1 }));
    renumbered[2] = forged;
    expect(await verifyChain(renumbered)).toMatchObject({ ok: false, brokenAt: { seq: 4 } });
  });

  it('detects reordered entries, with or without their seqs swapped', async () => {
    const entries = await chain(5);
    const swapped = [entries[0]!, entries[2]!, entries[1]!, ...entries.slice(3)];
    expect(await verifyChain(swapped)).toMatchObject(brokenAt(3, /expected seq 2, found 3/));
    const withSeqs = swapped.map((e, i) => ({ ...e, seq: i + 1 }));
    expect(await verifyChain(withSeqs)).toMatchObject(brokenAt(2, /edited|prevHash/));
  });

  it('accepts legacy entries before the chain, and counts them', async () => {
    const entries = await chain(6, 2);
    expect(entries[2]!.prevHash).toBe(CHAIN_START);
    expect(await verifyChain(entries)).toEqual({ ok: true, entries: 6, legacy: 2, head: entries[5]!.hash });
    expect(await verifyChain(await chain(3, 3))).toEqual({ ok: true, entries: 3, legacy: 3, head: CHAIN_START });
  });

  it('refuses a legacy entry after the chain began, and a chained entry turned legacy', async () => {
    const entries = await chain(5, 1);
    entries[3] = { ...entries[3]!, hash: LEGACY_HASH };
    expect(await verifyChain(entries)).toMatchObject(brokenAt(4, /unchained entry after the chain began/));
    // The chain's first entries turned legacy: the first chained one no longer starts the chain.
    const prefix = await chain(5);
    prefix[0] = { ...prefix[0]!, hash: LEGACY_HASH };
    expect(await verifyChain(prefix)).toMatchObject(brokenAt(2, /prevHash/));
  });

  it("refuses another workspace's entry in the chain", async () => {
    const entries = await chain(3);
    entries[2] = await rehashed({ ...entries[2]!, workspaceId: 'wsp_other' });
    expect(await verifyChain(entries)).toMatchObject(brokenAt(3, /another workspace|workspace wsp_other/));
  });
});

describe('verifying as the chain is read', () => {
  it('gives the same verdict fed a batch at a time as fed whole', async () => {
    const entries = await chain(12, 2);
    const verifier = new ChainVerifier();
    for (let at = 0; at < entries.length; at += 5) for (const entry of entries.slice(at, at + 5)) expect(await verifier.push(entry)).toBe(true);
    expect(verifier.verdict()).toEqual(await verifyChain(entries));
  });

  it('stops at the first break: later entries are not read, and do not change the verdict', async () => {
    const entries = await chain(10);
    entries[3] = { ...entries[3]!, target: 'dep_edited' };
    let read = 0;
    async function* rows() {
      for (const entry of entries) {
        read += 1;
        yield entry;
      }
    }
    const verdict = await verifyChain(rows());
    expect(verdict).toEqual({ ok: false, entries: 4, legacy: 0, brokenAt: { seq: 4, id: entries[3]!.id }, reason: expect.stringMatching(/edited/) });
    expect(read).toBe(4);

    const verifier = new ChainVerifier();
    for (const entry of entries.slice(0, 4)) await verifier.push(entry);
    expect(await verifier.push(entries[4]!)).toBe(false);
    expect(verifier.verdict()).toEqual(verdict);
  });
});
