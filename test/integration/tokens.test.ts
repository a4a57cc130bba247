import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { eq, sql } from 'drizzle-orm';
import { seedDemoDeployment, startSimNode, stopSimNodes, type SimNode } from '../../functions/hosts/dev/fleet.js';
import { controllerTick } from '../../functions/controller/driver.js';
import { resync } from '../../functions/dataplane/resync.js';
import { apiTokens, auditEvents, tokenRateWindows, workloads, workspaceMembers } from '../../functions/store/schema/index.js';
import { queryRows } from '../../functions/store/rows.js';
import { sha256Hex } from '../../shared/canonical.js';
import type { MachineView } from '../../shared/contracts/machine.js';
import type { ApiTokenCreated, ApiTokenView, MemberRemoved, MemberView, WorkspaceCreated, WorkspaceView } from '../../shared/contracts/tokens.js';
import type { Page } from '../../shared/contracts/page.js';
import { applyTestDeployment } from '../helpers/deployments.js';
import { createTestDatabase, describePg } from '../helpers/pg.js';
import { STEADY_LIVENESS, startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';

/**
 * API tokens and tenancy (docs/security.md, "API tokens"; docs/operations.md, "Tokens, members and workspaces"):
 * two control-plane instances on one PostgreSQL, a simulated node serving `sim-chat` through the first.
 */
describePg('API tokens, members and workspaces', () => {
  let database: { url: string; drop(): Promise<void> };
  let a: TestPlane;
  let b: TestPlane;
  let root: string;
  let nodes: SimNode[] = [];

  beforeAll(async () => {
    database = await createTestDatabase();
    root = await mkdtemp(join(tmpdir(), 'lnx-tokens-'));
    a = await startTestPlane({ store: 'pg', databaseUrl: database.url, config: STEADY_LIVENESS });
    b = await startTestPlane({ store: 'pg', databaseUrl: database.url, config: STEADY_LIVENESS });
    await seedDemoDeployment(a, 1, { loadMs: 100, memoryMiB: 256 });
    await applyTestDeployment(a, 'other-model', { pool: 'none' }, { replicas: 0 });
    nodes = [await startSimNode(a, 'tokens-node', join(root, 'nodes'))];
    await waitFor(
      async () => {
        const list = (await (await a.admin('/api/v1/machines')).json()) as Page<MachineView>;
        return list.data.some((m) => m.runtimes.some((r) => r.routable));
      },
      { timeoutMs: 90_000, what: 'sim-chat routable' },
    );
  }, 150_000);

  afterAll(async () => {
    await stopSimNodes(nodes);
    await b?.stop();
    await a?.stop();
    await database?.drop();
    await rm(root, { recursive: true, force: true });
  });

  const api = (plane: TestPlane, path: string, token: string, init: { method?: string; body?: unknown } = {}) =>
    fetch(`${plane.url}/api/v1${path}`, {
      method: init.method ?? 'GET',
      headers: { authorization: `Bearer ${token}`, ...(init.body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: init.body === undefined ? undefined : JSON.stringify(init.body),
    });
  const json = async <T>(response: Response, status: number): Promise<T> => {
    const text = await response.text();
    expect(response.status, text).toBe(status);
    return JSON.parse(text) as T;
  };
  const create = async (body: Record<string, unknown>, token = a.adminToken) =>
    await json<ApiTokenCreated>(await api(a, '/tokens', token, { method: 'POST', body }), 201);
  const models = (plane: TestPlane, token: string) => fetch(`${plane.url}/v1/models`, { headers: { authorization: `Bearer ${token}` } });
  const modelIds = async (plane: TestPlane, token: string) =>
    (await json<{ data: Array<{ id: string }> }>(await models(plane, token), 200)).data.map((m) => m.id);
  const inference = (plane: TestPlane, token: string, path: string, body: Record<string, unknown>) =>
    fetch(`${plane.url}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  const chat = (plane: TestPlane, token: string, model: string) =>
    inference(plane, token, '/v1/chat/completions', { model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 });
  const errorOf = async (response: Response) => ((await response.json()) as { error: { code: string; type?: string; message: string } }).error;
  const db = () => a.ports.store.db;
  const tokenCount = async () => (await db().select({ id: apiTokens.id }).from(apiTokens).where(eq(apiTokens.workspaceId, a.workspaceId))).length;

  /** Polls `request` until it answers `status`, for at most `withinMs`; how long it took. */
  const refusedWithin = async (request: () => Promise<Response>, withinMs: number): Promise<number> => {
    const started = performance.now();
    for (;;) {
      const response = await request();
      await response.body?.cancel();
      const elapsed = performance.now() - started;
      if (response.status === 401) return elapsed;
      if (elapsed > withinMs) throw new Error(`still ${response.status} after ${Math.round(elapsed)} ms`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  };

  it('shows a secret once and keeps only its SHA-256', async () => {
    const created = await create({ name: 'shown once', role: 'viewer' });
    expect(created.token).toMatch(/^lnx_[A-Za-z0-9_-]{43}$/);
    expect(created).toMatchObject({
      name: 'shown once',
      role: 'viewer',
      member: null,
      models: null,
      rateLimitPerMinute: null,
      createdBy: expect.stringMatching(/^tok_/),
      state: 'active',
      expiresAt: null,
      revokedAt: null,
    });
    const hash = await sha256Hex(created.token);
    const [row] = await db().select().from(apiTokens).where(eq(apiTokens.id, created.id));
    expect(row!.tokenHash).toBe(hash);
    expect(JSON.stringify(row)).not.toContain(created.token);
    // Never again through the API, not even the hash; nor in the audit log.
    const one = await (await api(a, `/tokens/${created.id}`, a.adminToken)).text();
    const list = await (await api(a, '/tokens?limit=500', a.adminToken)).text();
    const audits = JSON.stringify(await db().select().from(auditEvents).where(eq(auditEvents.target, created.id)));
    expect(audits).toContain('api_token.create');
    for (const text of [one, list, audits]) {
      expect(text).not.toContain(created.token);
      expect(text).not.toContain(hash);
    }
    expect(JSON.parse(one)).not.toHaveProperty('token');
    expect((await api(b, '/machines', created.token)).status).toBe(200);
  });

  it('pages the tokens in creation order and derives their state with the database clock', async () => {
    const soon = await create({ name: 'two seconds', role: 'inference', ttlSeconds: 2 });
    const later = await create({ name: 'an hour', role: 'inference', expiresAt: new Date(Date.now() + 3_600_000).toISOString() });
    expect(new Date(soon.expiresAt!).getTime() - new Date(soon.createdAt).getTime()).toBe(2_000);
    expect(later.state).toBe('active');
    expect((await models(b, soon.token)).status).toBe(200);
    await refusedWithin(() => models(b, soon.token), 6_000);
    expect((await api(a, '/machines', soon.token)).status).toBe(401);
    expect((await json<ApiTokenView>(await api(a, `/tokens/${soon.id}`, a.adminToken), 200)).state).toBe('expired');
    expect((await models(b, later.token)).status).toBe(200);

    const seen: ApiTokenView[] = [];
    let cursor: string | null = null;
    do {
      const page: Page<ApiTokenView> = await json(await api(a, `/tokens?limit=2${cursor ? `&cursor=${cursor}` : ''}`, a.adminToken), 200);
      expect(page.data.length).toBeLessThanOrEqual(2);
      seen.push(...page.data);
      cursor = page.nextCursor;
    } while (cursor);
    const ids = seen.map((t) => t.id);
    expect(ids).toEqual([...ids].sort());
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids).toEqual(expect.arrayContaining([soon.id, later.id]));
    expect(ids.length).toBe(await tokenCount());
  });

  it('refuses what a token may not carry with a 4xx, and changes nothing', async () => {
    const member = await json<MemberView>(
      await api(a, '/workspaces/current/members', a.adminToken, { method: 'POST', body: { name: 'ceiling@example.com', role: 'operator' } }),
      201,
    );
    const tokensBefore = await tokenCount();
    const auditsBefore = (await db().select({ id: auditEvents.id }).from(auditEvents)).length;
    const refusals: Array<[Record<string, unknown>, number, string, string?]> = [
      [{ name: 'x', role: 'viewer', models: ['sim-chat'] }, 400, 'validation_failed', 'models'],
      [{ name: 'x', role: 'admin', rateLimitPerMinute: 10 }, 400, 'validation_failed', 'rateLimitPerMinute'],
      [{ name: 'x', role: 'inference', ttlSeconds: 60, expiresAt: new Date(Date.now() + 60_000).toISOString() }, 400, 'validation_failed', 'expiresAt'],
      [{ name: 'x', role: 'inference', expiresAt: '2001-01-01T00:00:00Z' }, 400, 'validation_failed', 'expiresAt'],
      [{ name: 'x', role: 'inference', ttlSeconds: 0 }, 400, 'validation_failed', 'ttlSeconds'],
      [{ name: 'x', role: 'inference', models: ['Not A Name'] }, 400, 'validation_failed', 'models.0'],
      [{ name: 'x', role: 'inference', models: ['sim-chat', 'sim-chat'] }, 400, 'validation_failed', 'models'],
      [{ name: 'x', role: 'inference', rateLimitPerMinute: 0 }, 400, 'validation_failed', 'rateLimitPerMinute'],
      [{ name: 'x', role: 'root' }, 400, 'validation_failed', 'role'],
      [{ name: '', role: 'viewer' }, 400, 'validation_failed', 'name'],
      [{ name: 'x', role: 'admin', memberId: member.id }, 400, 'validation_failed', 'role'],
      [{ name: 'x', role: 'viewer', memberId: 'mem_01J0000000000000000000000' }, 404, 'not_found'],
    ];
    for (const [body, status, code, path] of refusals) {
      const response = await api(a, '/tokens', a.adminToken, { method: 'POST', body });
      const text = await response.text();
      expect({ status: response.status, code: (JSON.parse(text) as { error: { code: string } }).error.code }, `${JSON.stringify(body)}: ${text}`).toEqual({
        status,
        code,
      });
      if (path)
        expect(
          (JSON.parse(text) as { error: { details: Array<{ path: string }> } }).error.details.map((d) => d.path),
          text,
        ).toContain(path);
    }
    expect(await tokenCount()).toBe(tokensBefore);
    expect((await db().select({ id: auditEvents.id }).from(auditEvents)).length).toBe(auditsBefore);
    // Below the member's role, or equal to it, is fine.
    expect((await create({ name: 'within', role: 'operator', memberId: member.id })).member).toEqual({ id: member.id, name: 'ceiling@example.com' });
  });

  it('removes a member and revokes their tokens in the same change, at once on every instance', async () => {
    const member = await json<MemberView>(
      await api(a, '/workspaces/current/members', a.adminToken, { method: 'POST', body: { name: 'ana@example.com', role: 'operator' } }),
      201,
    );
    expect((await api(a, '/workspaces/current/members', a.adminToken, { method: 'POST', body: { name: 'ana@example.com', role: 'viewer' } })).status).toBe(409);
    const operator = await create({ name: 'ana ops', role: 'operator', memberId: member.id });
    const consumer = await create({ name: 'ana chat', role: 'inference', memberId: member.id });
    const bystander = await create({ name: 'not ana', role: 'inference' });
    expect((await api(b, '/machines', operator.token)).status).toBe(200);
    for (const plane of [a, b]) expect((await models(plane, consumer.token)).status).toBe(200);

    const removed = await json<MemberRemoved>(await api(a, `/workspaces/current/members/${member.id}`, a.adminToken, { method: 'DELETE' }), 200);
    expect(removed.revokedTokens.sort()).toEqual([operator.id, consumer.id].sort());
    // The management API caches nothing; this instance forgot its cached tokens before answering; the other within the bus's delivery.
    expect((await api(b, '/machines', operator.token)).status).toBe(401);
    expect((await models(a, consumer.token)).status).toBe(401);
    await refusedWithin(() => models(b, consumer.token), 1_000);
    expect((await models(b, bystander.token)).status).toBe(200);

    const rows = await db().select({ id: apiTokens.id, revokedAt: apiTokens.revokedAt }).from(apiTokens).where(eq(apiTokens.memberId, member.id));
    expect(rows.every((row) => row.revokedAt !== null)).toBe(true);
    const [memberRow] = await db().select().from(workspaceMembers).where(eq(workspaceMembers.id, member.id));
    expect(memberRow!.removedAt).not.toBeNull();
    expect((await json<ApiTokenView>(await api(a, `/tokens/${consumer.id}`, a.adminToken), 200)).state).toBe('revoked');
    const listed = await json<Page<MemberView>>(await api(a, '/workspaces/current/members', a.adminToken), 200);
    expect(listed.data.map((m) => m.id)).not.toContain(member.id);
    expect((await api(a, `/workspaces/current/members/${member.id}`, a.adminToken, { method: 'DELETE' })).status).toBe(404);
    expect((await api(a, '/tokens', a.adminToken, { method: 'POST', body: { name: 'late', role: 'viewer', memberId: member.id } })).status).toBe(404);
    // The name is free again for a new member.
    expect((await api(a, '/workspaces/current/members', a.adminToken, { method: 'POST', body: { name: 'ana@example.com', role: 'viewer' } })).status).toBe(201);
  });

  it('refuses on the other instance a token revoked on this one right after the revocation answers', async () => {
    // The control: /v1 on B really remembers tokens. A revocation that bypasses the API (and so sends no signal) is
    // still accepted by B from memory, until a bus resync forgets everything.
    const unsignalled = await create({ name: 'revoked behind the API', role: 'inference' });
    expect((await models(b, unsignalled.token)).status).toBe(200);
    await db().update(apiTokens).set({ revokedAt: sql`now()` }).where(eq(apiTokens.id, unsignalled.id));
    expect((await models(b, unsignalled.token)).status).toBe(200);
    await resync(b.ports);
    expect((await models(b, unsignalled.token)).status).toBe(401);

    const consumer = await create({ name: 'revoked through the API', role: 'inference' });
    const viewer = await create({ name: 'viewer revoked through the API', role: 'viewer' });
    for (let i = 0; i < 2; i += 1) expect((await models(b, consumer.token)).status).toBe(200);
    expect((await api(b, '/machines', viewer.token)).status).toBe(200);

    const revoked = await json<ApiTokenView>(await api(a, `/tokens/${consumer.id}`, a.adminToken, { method: 'DELETE' }), 200);
    expect(revoked).toMatchObject({ id: consumer.id, state: 'revoked', revokedAt: expect.any(String) });
    const elapsed = await refusedWithin(() => models(b, consumer.token), 1_000);
    expect((await models(a, consumer.token)).status).toBe(401);
    const error = await errorOf(await models(b, consumer.token));
    expect(error).toMatchObject({ type: 'authentication_error', code: 'invalid_api_key' });
    console.log(`revoked on A, refused on B's /v1 after ${elapsed.toFixed(0)} ms`);

    await json(await api(a, `/tokens/${viewer.id}`, a.adminToken, { method: 'DELETE' }), 200);
    expect((await api(b, '/machines', viewer.token)).status).toBe(401);

    // Revoking again is a conflict, the same on either instance; an unknown token is 404.
    const again = await api(b, `/tokens/${consumer.id}`, b.adminToken, { method: 'DELETE' });
    expect([again.status, (await errorOf(again)).code]).toEqual([409, 'conflict']);
    expect((await api(a, '/tokens/tok_01J0000000000000000000000', a.adminToken, { method: 'DELETE' })).status).toBe(404);
  });

  it('hides models outside an allow-list exactly as models that do not exist', async () => {
    const limited = await create({ name: 'sim-chat only', role: 'inference', models: ['sim-chat'] });
    expect(limited.models).toEqual(['sim-chat']);
    expect(await modelIds(a, limited.token)).toEqual(['sim-chat']);
    expect(await modelIds(a, a.adminToken)).toEqual(['other-model', 'sim-chat']);

    await a.ports.dataPlane.workloads.flush();
    const workloadsBefore = (await db().select({ id: workloads.id }).from(workloads)).length;
    for (const [path, extra] of [
      ['/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }] }],
      ['/v1/completions', { prompt: 'hi' }],
      ['/v1/embeddings', { input: 'hi' }],
    ] as const) {
      const hidden = await inference(a, limited.token, path, { model: 'other-model', ...extra });
      const unknown = await inference(a, limited.token, path, { model: 'no-such-model', ...extra });
      expect([hidden.status, unknown.status], path).toEqual([404, 404]);
      expect(hidden.headers.get('x-lunanexa-workload-id')).toBeNull();
      const [hiddenText, unknownText] = [await hidden.text(), await unknown.text()];
      expect(hiddenText.replaceAll('other-model', 'MODEL'), path).toBe(unknownText.replaceAll('no-such-model', 'MODEL'));
      expect(JSON.parse(hiddenText)).toMatchObject({ error: { type: 'not_found_error', code: 'model_not_found', param: 'model' } });
    }
    await a.ports.dataPlane.workloads.flush();
    expect((await db().select({ id: workloads.id }).from(workloads)).length).toBe(workloadsBefore);

    const allowed = await chat(a, limited.token, 'sim-chat');
    expect(allowed.status).toBe(200);
    expect(((await allowed.json()) as { choices: unknown[] }).choices).toHaveLength(1);
  });

  it('limits a token exactly across instances: 429 with Retry-After, then the next window admits it again', async () => {
    const limited = await create({ name: 'three a minute', role: 'inference', rateLimitPerMinute: 3 });
    const unlimited = await create({ name: 'unlimited', role: 'inference' });
    // Four requests must land in one window: start in a fresh one when this one is about to end.
    const [left] = await queryRows<{ s: number | string }>(
      db(),
      sql`select extract(epoch from (date_trunc('minute', now()) + interval '1 minute' - now()))::float8 as s`,
    );
    if (Number(left!.s) < 5) await new Promise((resolve) => setTimeout(resolve, Number(left!.s) * 1000 + 100));

    for (const plane of [a, b, a]) expect((await models(plane, limited.token)).status).toBe(200);
    const refused = await models(b, limited.token);
    expect(refused.status).toBe(429);
    const retryAfter = Number(refused.headers.get('retry-after'));
    expect(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 60, `Retry-After ${refused.headers.get('retry-after')}`).toBe(true);
    expect(await errorOf(refused)).toMatchObject({ type: 'rate_limit_error', code: 'rate_limit_exceeded' });
    // Inference calls count in the same window (and are refused before they reach a runtime).
    expect((await chat(a, limited.token, 'sim-chat')).status).toBe(429);
    expect((await models(a, unlimited.token)).status).toBe(200);
    const windows = await db().select().from(tokenRateWindows).where(eq(tokenRateWindows.tokenId, limited.id));
    expect(windows.map((w) => w.count)).toEqual([5]);
    expect(await db().select().from(tokenRateWindows).where(eq(tokenRateWindows.tokenId, unlimited.id))).toEqual([]);

    // The minute passes (its window moved back a minute, as the clock would): the next request opens a new window.
    await db()
      .update(tokenRateWindows)
      .set({ windowStart: sql`${tokenRateWindows.windowStart} - interval '1 minute'` })
      .where(eq(tokenRateWindows.tokenId, limited.id));
    expect((await models(b, limited.token)).status).toBe(200);
    // The controller tick deletes windows no request counts in any more, and only those.
    await db()
      .update(tokenRateWindows)
      .set({ windowStart: sql`${tokenRateWindows.windowStart} - interval '10 minutes'` })
      .where(sql`${tokenRateWindows.tokenId} = ${limited.id} and ${tokenRateWindows.count} = 5`);
    await controllerTick({ ctx: a.systemCtx });
    expect((await db().select().from(tokenRateWindows).where(eq(tokenRateWindows.tokenId, limited.id))).map((w) => w.count)).toEqual([1]);
  });

  it('creates workspaces only for admins of the default one, each with its first admin token, and keeps every tenant to itself', async () => {
    const created = await json<WorkspaceCreated>(await api(a, '/workspaces', a.adminToken, { method: 'POST', body: { name: 'team-b' } }), 201);
    expect(created.workspace.name).toBe('team-b');
    expect(created.adminToken).toMatchObject({ role: 'admin', state: 'active', member: null });
    const teamB = created.adminToken.token;
    expect((await api(a, '/workspaces', a.adminToken, { method: 'POST', body: { name: 'team-b' } })).status).toBe(409);
    const forbidden = await api(b, '/workspaces', teamB, { method: 'POST', body: { name: 'team-c' } });
    expect([forbidden.status, (await errorOf(forbidden)).code]).toEqual([403, 'forbidden']);

    const all = await json<Page<WorkspaceView>>(await api(a, '/workspaces', a.adminToken), 200);
    expect(all.data.map((w) => w.name)).toEqual(['default', 'team-b']);
    const own = await json<Page<WorkspaceView>>(await api(b, '/workspaces', teamB), 200);
    expect(own.data.map((w) => w.name)).toEqual(['team-b']);
    const tokensOfB = await json<Page<ApiTokenView>>(await api(b, '/tokens', teamB), 200);
    expect(tokensOfB.data.map((t) => t.id)).toEqual([created.adminToken.id]);
    const ofA = (await json<Page<ApiTokenView>>(await api(a, '/tokens?limit=1', a.adminToken), 200)).data[0]!;
    expect((await api(b, `/tokens/${ofA.id}`, teamB)).status).toBe(404);
    expect((await api(b, `/tokens/${ofA.id}`, teamB, { method: 'DELETE' })).status).toBe(404);
    expect(await modelIds(b, teamB)).toEqual([]);

    // A workspace keeps an active admin token: its last one cannot be revoked, until another exists.
    const last = await api(b, `/tokens/${created.adminToken.id}`, teamB, { method: 'DELETE' });
    expect([last.status, (await errorOf(last)).code]).toEqual([409, 'conflict']);
    const second = await json<ApiTokenCreated>(await api(b, '/tokens', teamB, { method: 'POST', body: { name: 'second admin', role: 'admin' } }), 201);
    await json(await api(b, `/tokens/${created.adminToken.id}`, second.token, { method: 'DELETE' }), 200);
    expect((await api(a, '/tokens', teamB)).status).toBe(401);
    // Nor can the member holding its last one be removed: the removal and its revocations are undone together.
    const boss = await json<MemberView>(
      await api(b, '/workspaces/current/members', second.token, { method: 'POST', body: { name: 'boss', role: 'admin' } }),
      201,
    );
    const bossToken = await json<ApiTokenCreated>(
      await api(b, '/tokens', second.token, { method: 'POST', body: { name: 'boss admin', role: 'admin', memberId: boss.id } }),
      201,
    );
    await json(await api(b, `/tokens/${second.id}`, bossToken.token, { method: 'DELETE' }), 200);
    const removal = await api(b, `/workspaces/current/members/${boss.id}`, bossToken.token, { method: 'DELETE' });
    expect([removal.status, (await errorOf(removal)).code]).toEqual([409, 'conflict']);
    expect((await json<Page<MemberView>>(await api(b, '/workspaces/current/members', bossToken.token), 200)).data.map((m) => m.id)).toEqual([boss.id]);
    expect((await json<ApiTokenView>(await api(b, `/tokens/${bossToken.id}`, bossToken.token), 200)).state).toBe('active');
  });
});
