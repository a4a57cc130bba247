import { execFile } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auditHash, verifyChain, type AuditEntry, type ChainVerdict } from '../../shared/audit-chain.js';
import type { AuditPage } from '../../shared/contracts/audit.js';
import { queryRows } from '../../functions/store/rows.js';
import { workloads } from '../../functions/store/schema/index.js';
import { newId } from '../../shared/ids.js';
import { describePg } from '../helpers/pg.js';
import { startTestPlane, type StoreKind, type TestPlane } from '../helpers/plane.js';
import { insertToken, insertWorkspace } from '../helpers/sql-tokens.js';

/**
 * The audit log (docs/security.md, "Audit log") through `/api/v1/audit`, on each store: what a change through the
 * API records, filters and pages, the export (verified offline) and the server's verification; the append-only
 * trigger; and tampering by someone who can switch the trigger off, found and named by its seq.
 */

/** The fields of an exported entry: exactly those its hash covers, and the hash. */
const ENTRY_FIELDS = ['id', 'workspaceId', 'seq', 'at', 'actor', 'action', 'target', 'outcome', 'details', 'prevHash', 'hash'];

/** `lunanexa audit verify --file` on an export, as an operator runs it: its exit status and the verdict it printed. */
async function verifiedOffline(dir: string, text: string): Promise<{ status: number; verdict: ChainVerdict }> {
  const file = join(dir, 'audit.jsonl');
  await writeFile(file, text);
  return await new Promise((resolve, reject) => {
    execFile(process.execPath, ['bin/lunanexa.mjs', 'audit', 'verify', '--file', file, '--json'], (error, stdout) => {
      const status = error ? error.code : 0;
      if (typeof status !== 'number') reject(error);
      else resolve({ status, verdict: JSON.parse(stdout) as ChainVerdict });
    });
  });
}

function auditSuite(kind: StoreKind) {
  let plane: TestPlane;
  let admin: { id: string; token: string };
  let viewer: string;
  let operator: string;
  let operatorId: string;
  /** The enrollment token's secret: shown once, never audited. */
  let enrollmentSecret: string;
  let enrollmentId: string;

  const api = (path: string, token: string, init: RequestInit = {}) =>
    fetch(`${plane.url}/api/v1${path}`, { ...init, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', ...init.headers } });
  const page = async (query = '', token = admin.token): Promise<AuditPage> => {
    const response = await api(`/audit${query}`, token);
    expect(response.status, await response.clone().text()).toBe(200);
    return (await response.json()) as AuditPage;
  };
  const exported = async (token = admin.token): Promise<{ text: string; entries: AuditEntry[] }> => {
    const response = await api('/audit/export', token);
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toBe('application/x-ndjson');
    const text = await response.text();
    return {
      text,
      entries: text
        .split('\n')
        .filter((line) => line !== '')
        .map((line) => JSON.parse(line) as AuditEntry),
    };
  };
  const verified = async (token = admin.token): Promise<ChainVerdict> => {
    const response = await api('/audit/verify', token);
    expect(response.status).toBe(200);
    return (await response.json()) as ChainVerdict;
  };
  const superuser = (statement: ReturnType<typeof sql>) => plane.ports.store.db.execute(statement);
  /** Why the store refused `statement` (drizzle wraps the database's error as its cause). */
  const refusal = async (statement: ReturnType<typeof sql>): Promise<string> => {
    try {
      await superuser(statement);
    } catch (error) {
      const cause = (error as { cause?: unknown }).cause;
      return cause instanceof Error ? cause.message : String(error);
    }
    return 'not refused';
  };

  beforeAll(async () => {
    plane = await startTestPlane({ store: kind });
    const db = plane.ports.store.db;
    admin = await insertToken(db, { workspaceId: plane.workspaceId, name: 'auditor', role: 'admin' });
    viewer = (await insertToken(db, { workspaceId: plane.workspaceId, name: 'watcher', role: 'viewer' })).token;
    ({ token: operator, id: operatorId } = await insertToken(db, { workspaceId: plane.workspaceId, name: 'hands', role: 'operator' }));
  }, 60_000);

  afterAll(async () => {
    await plane?.stop();
  });

  it('records changes made through the API with actor, action, target and outcome, and no secret', async () => {
    const created = await api('/enrollment-tokens', admin.token, { method: 'POST', body: JSON.stringify({ name: 'gpu-7', labels: { rack: 'r1' } }) });
    expect(created.status).toBe(201);
    ({ token: enrollmentSecret, id: enrollmentId } = (await created.json()) as { token: string; id: string });
    const spec = { model: 'm', runtime: { kind: 'simulated', model: 'm' }, replicas: 0, selector: { none: 'none' } };
    const put = await api('/deployments/audited', admin.token, { method: 'PUT', body: JSON.stringify(spec) });
    expect(put.status).toBe(200);
    const deploymentId = ((await put.json()) as { id: string }).id;
    expect((await api('/deployments/audited', admin.token, { method: 'PUT', body: JSON.stringify({ ...spec, replicas: 1 }) })).status).toBe(200);

    const { data } = await page();
    expect(data.slice(0, 3)).toMatchObject([
      { actor: admin.id, action: 'deployment.update', target: deploymentId, outcome: 'succeeded', details: { generation: 2 } },
      { actor: admin.id, action: 'deployment.create', target: deploymentId, outcome: 'succeeded', details: { name: 'audited' } },
      { actor: admin.id, action: 'enrollment_token.create', target: enrollmentId, outcome: 'succeeded', details: { name: 'gpu-7', labels: { rack: 'r1' } } },
    ]);
    // Newest first, in the chain's order, each entry with exactly its hashed fields and hash.
    expect(data.map((e) => e.seq)).toEqual([...data.map((e) => e.seq)].sort((a, b) => b - a));
    for (const entry of data) expect(Object.keys(entry).sort()).toEqual([...ENTRY_FIELDS].sort());
    expect(JSON.stringify(data)).not.toContain(enrollmentSecret);
  });

  it('filters by action, actor, target, outcome and time, and pages newest first', async () => {
    const all = (await page()).data;
    expect((await page('?action=deployment.create')).data.map((e) => e.target)).toEqual(
      all.filter((e) => e.action === 'deployment.create').map((e) => e.target),
    );
    expect((await page(`?actor=${admin.id}`)).data).toHaveLength(3);
    expect((await page(`?target=${enrollmentId}`)).data.map((e) => e.action)).toEqual(['enrollment_token.create']);
    expect((await page('?outcome=denied')).data).toEqual([]);
    const newest = all[0]!;
    expect((await page(`?since=${encodeURIComponent(newest.at)}`)).data.map((e) => e.id)).toContain(newest.id);
    expect((await page(`?until=${encodeURIComponent(newest.at)}`)).data.map((e) => e.id)).not.toContain(newest.id);
    expect((await page('?since=2000-01-01T00:00:00%2B02:00&until=2000-01-02T00:00:00Z')).data).toEqual([]);

    const walked: AuditEntry[] = [];
    let cursor: string | null = '';
    while (cursor !== null) {
      const next: AuditPage = await page(`?limit=2${cursor ? `&cursor=${cursor}` : ''}`);
      expect(next.data.length).toBeLessThanOrEqual(2);
      walked.push(...next.data);
      cursor = next.nextCursor;
    }
    expect(walked).toEqual(all);
  });

  it('answers 400 to bad filters and cursors, and 403 below admin', async () => {
    for (const query of [
      '?outcome=maybe',
      '?since=yesterday',
      '?until=2026-01-01',
      '?limit=0',
      '?cursor=bm9wZQ',
      `?action=${'a'.repeat(300)}`,
      '?action=99999999999999999999',
      '?actor=1e309',
      '?target=no%20spaces',
      '?target=-dash-first',
    ]) {
      const response = await api(`/audit${query}`, admin.token);
      expect(response.status, query).toBe(400);
      expect(((await response.json()) as { error: { code: string } }).error.code).toMatch(/validation_failed|invalid_cursor/);
    }
    for (const token of [viewer, operator])
      for (const path of ['/audit', '/audit/export', '/audit/verify']) expect((await api(path, token)).status, path).toBe(403);
    expect((await fetch(`${plane.url}/api/v1/audit/export`)).status).toBe(401);
    // Each refusal of a known token is itself audited: who tried what, with which role.
    const denied = (await page('?action=access.denied&target=GET%20/api/v1/audit/export')).data;
    expect(denied.map((e) => [e.outcome, e.details])).toEqual([
      ['denied', { role: 'operator', required: 'admin' }],
      ['denied', { role: 'viewer', required: 'admin' }],
    ]);
  });

  it('records a cancel of a running workload (workload.cancel) in the name of the token that cancelled it', async () => {
    const id = newId('workload');
    await plane.ports.store.db.insert(workloads).values({
      id,
      workspaceId: plane.workspaceId,
      deploymentId: 'dep_cancelled',
      kind: 'chat',
      state: 'running',
      instanceId: plane.ports.instanceId,
      tokenId: admin.id,
      deadline: new Date(Date.now() + 3_600_000),
    });
    const cancelled = await api(`/workloads/${id}/cancel`, operator, { method: 'POST' });
    expect(cancelled.status, await cancelled.clone().text()).toBe(202);
    const [entry] = (await page(`?action=workload.cancel&target=${id}`)).data;
    expect(entry).toMatchObject({
      actor: operatorId,
      action: 'workload.cancel',
      target: id,
      outcome: 'succeeded',
      details: { deploymentId: 'dep_cancelled', tokenId: admin.id },
    });
  });

  it('exports the whole chain in seq order, which verifies offline as the server verifies it, with no secret in it', async () => {
    const { text, entries } = await exported();
    expect(entries.map((e) => e.seq)).toEqual(entries.map((_, i) => i + 1));
    for (const entry of entries) expect(Object.keys(entry)).toEqual(ENTRY_FIELDS);
    expect(text).not.toContain(enrollmentSecret);
    const offline = await verifyChain(entries);
    expect(offline).toMatchObject({ ok: true, entries: entries.length });
    expect(await verified()).toEqual(offline);
    expect(await verifiedOffline(plane.dataDir, text)).toEqual({ status: 0, verdict: offline });
  });

  it("keeps each workspace's log to itself", async () => {
    const db = plane.ports.store.db;
    const elsewhere = await insertWorkspace(db, `audit-elsewhere-${kind}`);
    const theirs = await insertToken(db, { workspaceId: elsewhere, name: 'their admin', role: 'admin' });
    expect((await api('/enrollment-tokens', theirs.token, { method: 'POST', body: JSON.stringify({ labels: {} }) })).status).toBe(201);
    const their = await exported(theirs.token);
    expect(their.entries.map((e) => [e.seq, e.action, e.workspaceId])).toEqual([[1, 'enrollment_token.create', elsewhere]]);
    expect(await verified(theirs.token)).toMatchObject({ ok: true, entries: 1 });
    expect((await page('', theirs.token)).data).toHaveLength(1);
    const ours = await exported();
    expect(ours.entries.every((e) => e.workspaceId === plane.workspaceId)).toBe(true);
  });

  it('accepts legacy entries from before the chain as its prefix', async () => {
    const db = plane.ports.store.db;
    const old = await insertWorkspace(db, `audit-legacy-${kind}`);
    const token = await insertToken(db, { workspaceId: old, name: 'old admin', role: 'admin' });
    // As the migration left rows it found: numbered, hash 'legacy', at with microseconds.
    await superuser(sql`insert into audit_events (id, workspace_id, seq, actor, action, target, details, at)
      values ('aud_legacy_1_${sql.raw(kind)}', ${old}, 1, 'system', 'machine.enroll', 'mch_1', '{}', '2025-01-01T00:00:00.123456Z'),
             ('aud_legacy_2_${sql.raw(kind)}', ${old}, 2, 'system', 'machine.revoke', 'mch_1', '{"reason":"old"}', '2025-01-02T00:00:00Z')`);
    expect((await api('/enrollment-tokens', token.token, { method: 'POST', body: JSON.stringify({ labels: {} }) })).status).toBe(201);
    const { entries } = await exported(token.token);
    expect(entries.map((e) => [e.seq, e.hash === 'legacy', e.prevHash])).toEqual([
      [1, true, ''],
      [2, true, ''],
      [3, false, ''],
    ]);
    expect(await verified(token.token)).toEqual({ ok: true, entries: 3, legacy: 2, head: entries[2]!.hash });
  });

  it('cannot upgrade legacy entries in place, so the legacy prefix stays accepted for good', async () => {
    // Why the writer and the verifier keep their 'legacy' branch: chaining a pre-chain row means rewriting its
    // hash (and every later row's prevHash), and the append-only trigger refuses exactly that, as it must.
    const db = plane.ports.store.db;
    const old = await insertWorkspace(db, `audit-pre-chain-${kind}`);
    const token = await insertToken(db, { workspaceId: old, name: 'old admin', role: 'admin' });
    await superuser(sql`insert into audit_events (id, workspace_id, seq, actor, action, target, details, at)
      values ('aud_prechain_${sql.raw(kind)}', ${old}, 1, 'system', 'machine.enroll', 'mch_1', '{}', '2025-01-01T00:00:00Z')`);
    expect((await api('/enrollment-tokens', token.token, { method: 'POST', body: JSON.stringify({ labels: {} }) })).status).toBe(201);
    const { entries } = await exported(token.token);
    // The upgrade a migration would make: the pre-chain row hashed as the writer hashes, the next one linked to it.
    const upgraded = await auditHash({ ...entries[0]!, prevHash: '' });
    expect(await refusal(sql`update audit_events set hash = ${upgraded} where id = ${entries[0]!.id}`)).toMatch(/append-only/);
    expect(await refusal(sql`update audit_events set prev_hash = ${upgraded} where id = ${entries[1]!.id}`)).toMatch(/append-only/);
    expect(await verified(token.token)).toEqual({ ok: true, entries: 2, legacy: 1, head: entries[1]!.hash });
  });

  it('refuses UPDATE, DELETE and TRUNCATE of audit entries', async () => {
    for (const statement of [
      sql`update audit_events set details = '{"forged":true}' where workspace_id = ${plane.workspaceId}`,
      sql`delete from audit_events where workspace_id = ${plane.workspaceId}`,
      sql`truncate audit_events`,
    ]) {
      expect(await refusal(statement)).toMatch(/append-only/);
    }
    expect(await verified()).toMatchObject({ ok: true });
  });

  it('finds tampering done with the trigger switched off, and names the seq it broke at', async () => {
    const before = await verified();
    expect(before.ok).toBe(true);
    const [victim] = await queryRows<{ seq: number | string; id: string }>(
      plane.ports.store.db,
      sql`select seq, id from audit_events where workspace_id = ${plane.workspaceId} and action = 'deployment.create'`,
    );
    await superuser(sql`alter table audit_events disable trigger user`);
    try {
      await superuser(sql`update audit_events set details = jsonb_set(details, '{name}', '"innocent"') where id = ${victim!.id}`);
    } finally {
      await superuser(sql`alter table audit_events enable trigger user`);
    }
    const after = await verified();
    expect(after).toMatchObject({ ok: false, brokenAt: { seq: Number(victim!.seq), id: victim!.id }, reason: expect.stringMatching(/edited/) });
    // The export shows it as well, offline.
    const { text, entries } = await exported();
    expect(await verifyChain(entries)).toEqual(after);
    expect(await verifiedOffline(plane.dataDir, text)).toEqual({ status: 4, verdict: after });
    // And the trigger is back.
    expect(await refusal(sql`delete from audit_events where id = ${victim!.id}`)).toMatch(/append-only/);
  });
}

describe('the audit log on PGlite', () => auditSuite('pglite'));
describePg('the audit log on PostgreSQL', () => {
  auditSuite('pg');

  describe('under concurrent changes', () => {
    let plane: TestPlane;
    beforeAll(async () => {
      plane = await startTestPlane({ store: 'pg' });
    }, 60_000);
    afterAll(async () => {
      await plane?.stop();
    });

    it('chains 20 parallel API writes into one gap-free chain', async () => {
      const before = ((await (await plane.admin('/api/v1/audit/verify')).json()) as ChainVerdict).entries;
      const answers = await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          i % 2
            ? plane.admin('/api/v1/enrollment-tokens', { method: 'POST', body: JSON.stringify({ labels: { n: String(i) } }) })
            : plane.admin(`/api/v1/deployments/par-${i}`, {
                method: 'PUT',
                body: JSON.stringify({ model: 'm', runtime: { kind: 'simulated', model: 'm' }, replicas: 0, selector: { none: 'none' } }),
              }),
        ),
      );
      expect(answers.map((a) => a.status).sort()).toEqual([...Array(10).fill(200), ...Array(10).fill(201)]);
      const text = await (await plane.admin('/api/v1/audit/export')).text();
      const entries = text
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line) as AuditEntry);
      expect(entries.map((e) => e.seq)).toEqual(entries.map((_, i) => i + 1));
      expect(entries.length).toBeGreaterThanOrEqual(before + 20);
      const verdict = await verifyChain(entries);
      expect(verdict).toMatchObject({ ok: true, entries: entries.length });
      expect(await (await plane.admin('/api/v1/audit/verify')).json()).toEqual(verdict);
    });
  });
});
