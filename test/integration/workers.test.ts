import { afterAll, beforeAll, expect, it } from 'vitest';
import { eq, sql } from 'drizzle-orm';
import { WebSocket } from 'ws';
import { Miniflare } from 'miniflare';
import { apiTokens, clusterSettings, machines, tokenRateWindows } from '../../functions/store/schema/index.js';
import { createApiToken } from '../../functions/services/api-tokens.js';
import { generateMachineKey } from '../../agent/state.js';
import { signMachineRequest } from '../../shared/machine-jwt.js';
import { EnrollResponse } from '../../shared/contracts/enrollment.js';
import type { CryptoKey } from 'jose';
import { describePg } from '../helpers/pg.js';
import { startEdgeFixture, workerOptions, type EdgeFixture } from '../helpers/edge.js';
import { TEST_INVENTORY } from '../helpers/machine.js';
import { waitFor } from '../helpers/plane.js';

const BASE = 'http://lunanexa.test';

type ScheduledFetcher = { scheduled(opts: { cron?: string; scheduledTime?: Date }): Promise<{ outcome: string; noRetry: boolean }> };
type ErrorEnvelope = { error: { code: string; message: string; requestId: string; details?: unknown } };

describePg('the control plane as a Cloudflare Worker (Miniflare + Neon driver over a WebSocket proxy)', () => {
  let fixture: EdgeFixture;
  let mf: Miniflare;
  let machine: (EnrollResponse & { key: CryptoKey }) | undefined;

  beforeAll(async () => {
    fixture = await startEdgeFixture();
    mf = new Miniflare(workerOptions(fixture, 'lunanexa', fixture.bindings({ LUNANEXA_STREAM_KEEPALIVE_MS: '200' })));
    await mf.ready;
  });

  afterAll(async () => {
    // Each step runs even when an earlier one fails (a Miniflare that never started refuses to dispose).
    await mf?.dispose().catch(() => {});
    await fixture?.stop();
  });

  const call = (path: string, init: RequestInit & { token?: string } = {}) => {
    const headers = new Headers(init.headers);
    if (init.token) headers.set('authorization', `Bearer ${init.token}`);
    if (init.body && !headers.has('content-type')) headers.set('content-type', 'application/json');
    return mf.dispatchFetch(`${BASE}${path}`, { method: init.method, body: init.body as string | undefined, headers: Object.fromEntries(headers) });
  };

  it('answers /healthz without touching the store', async () => {
    const before = fixture.proxy.acceptedConnections();
    const response = await call('/healthz');
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ status: 'ok' });
    // Neon's Pool connects lazily, so a liveness probe costs no database connection.
    expect(fixture.proxy.acceptedConnections()).toBe(before);
  });

  it('reads the real PostgreSQL through the Neon driver for /readyz', async () => {
    const response = await call('/readyz');
    expect(response.status).toBe(200);
    expect(await response.json()).toMatchObject({ status: 'ready', store: 'neon', migrated: true });
  });

  it('mints an enrollment token, enrolls a machine and lists it, all through the Worker', async () => {
    const minted = await call('/api/v1/enrollment-tokens', {
      method: 'POST',
      token: fixture.adminToken,
      body: JSON.stringify({ name: 'edge-node', labels: { via: 'worker' } }),
    });
    expect(minted.status).toBe(201);
    const { token } = (await minted.json()) as { token: string };

    const key = await generateMachineKey();
    const enrolled = await call('/agent/v1/enroll', {
      method: 'POST',
      body: JSON.stringify({ token, name: 'edge-node', publicKey: key.publicJwk, inventory: TEST_INVENTORY }),
    });
    expect(enrolled.status).toBe(201);
    const body = EnrollResponse.parse(await enrolled.json());
    const { machineId } = body;
    expect(machineId).toMatch(/^mch_/);
    expect(body.jwks.keys.length).toBeGreaterThan(0);
    machine = { ...body, key: key.privateKey };
    // The row is really in PostgreSQL, not in some Worker-local state.
    const [row] = await fixture.store.db.select().from(machines).where(eq(machines.id, machineId));
    expect(row?.labels).toEqual({ via: 'worker' });

    const listed = await call('/api/v1/machines', { token: fixture.adminToken });
    expect(listed.status).toBe(200);
    const { data } = (await listed.json()) as { data: { id: string; name: string }[] };
    expect(data.map((m) => m.id)).toContain(machineId);
  });

  it('closes its Neon connections once each request is answered', async () => {
    const before = fixture.proxy.acceptedConnections();
    expect((await call('/readyz')).status).toBe(200);
    expect(fixture.proxy.acceptedConnections()).toBeGreaterThan(before);
    // Closing is handed to ctx.waitUntil, so it may finish just after the response.
    await waitFor(async () => fixture.proxy.openConnections() === 0, { timeoutMs: 5_000, what: 'the worker to close its connection' });
    expect(fixture.proxy.openConnections()).toBe(0);
  });

  it('keeps the Neon connection for a live SSE stream and lets it go when the stream ends', async () => {
    expect(machine, 'the enroll test runs first').toBeDefined();
    const m = machine!;
    const path = '/agent/v1/stream';
    const jwt = await signMachineRequest({ key: m.key, kid: m.credentialId, machineId: m.machineId, clusterId: m.clusterId, method: 'GET', path, body: '' });
    const response = await call(path, { headers: { authorization: `Bearer ${jwt}` } });
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toContain('text/event-stream');
    const reader = response.body!.getReader();
    const decoder = new TextDecoder();
    let text = '';
    const deadline = Date.now() + 10_000;
    // Keep-alives renew the stream lease in the database after the response has been returned, so two of them
    // prove the connection outlived the handler.
    while ((text.match(/: keep-alive/g) ?? []).length < 2 && Date.now() < deadline) {
      const { value, done } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
    }
    expect(text).toContain('event: hello');
    expect(text).toContain('event: desired');
    expect((text.match(/: keep-alive/g) ?? []).length).toBeGreaterThanOrEqual(2);
    expect(fixture.proxy.openConnections()).toBeGreaterThan(0);
    await reader.cancel();
    await waitFor(async () => fixture.proxy.openConnections() === 0, { timeoutMs: 10_000, what: 'the stream to release its connection' });
  });

  it('rejects an unknown API token with the 401 envelope', async () => {
    const response = await call('/api/v1/machines', { token: 'lnx_not-a-real-token-at-all' });
    expect(response.status).toBe(401);
    const body = (await response.json()) as ErrorEnvelope;
    expect(body.error.code).toBe('invalid_token');
    expect(body.error.requestId).toBeTruthy();
  });

  it('refuses a revoked token on its next request, as no isolate remembers tokens, and rate-limits over the SQL endpoint', async () => {
    const consumer = await createApiToken({ ctx: fixture.ctx, input: { workspaceId: fixture.workspaceId, name: 'edge consumer', role: 'inference' } });
    for (let i = 0; i < 2; i += 1) expect((await call('/v1/models', { token: consumer.token })).status).toBe(200);
    // Revoked behind the Worker's back: no signal of any kind reaches its isolate, and none needs to.
    await fixture.store.db.update(apiTokens).set({ revokedAt: sql`now()` }).where(eq(apiTokens.id, consumer.id));
    expect((await call('/v1/models', { token: consumer.token })).status).toBe(401);

    const limited = await createApiToken({
      ctx: fixture.ctx,
      input: { workspaceId: fixture.workspaceId, name: 'edge limited', role: 'inference', rateLimitPerMinute: 1 },
    });
    const first = await call('/v1/models', { token: limited.token });
    const second = await call('/v1/models', { token: limited.token });
    // The minute may turn between the two; then the third is the refused one.
    const refused = second.status === 429 ? second : await call('/v1/models', { token: limited.token });
    expect([first.status, refused.status]).toEqual([200, 429]);
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    const [window] = await fixture.store.db.select().from(tokenRateWindows).where(eq(tokenRateWindows.tokenId, limited.id));
    expect(window?.count).toBeGreaterThanOrEqual(1);
  });

  it('answers malformed JSON with 400, not a 500', async () => {
    const response = await call('/agent/v1/enroll', { method: 'POST', body: '{"token": "abc",' });
    expect(response.status).toBe(400);
    expect(((await response.json()) as ErrorEnvelope).error.code).toBe('invalid_json');
  });

  it('serves prom-client metrics from inside workerd, to a viewer token only', async () => {
    expect((await call('/metrics')).status).toBe(401);
    const response = await call('/metrics', { token: fixture.adminToken });
    expect(response.status).toBe(200);
    expect(await response.text()).toContain('lunanexa_enrollments_total{result="ok"}');
  });

  it('runs the controller tick from the cron trigger', async () => {
    const before = await fixture.store.db.select().from(clusterSettings).where(eq(clusterSettings.key, 'controller'));
    expect(before).toEqual([]);
    // Miniflare types its Fetcher through @cloudflare/workers-types, which this project does not install.
    const worker = (await mf.getWorker()) as unknown as ScheduledFetcher;
    const result = await worker.scheduled({ cron: '*/1 * * * *', scheduledTime: new Date() });
    expect(result.outcome).toBe('ok');
    const [after] = await fixture.store.db.select().from(clusterSettings).where(eq(clusterSettings.key, 'controller'));
    const lastTickAt = new Date((after!.value as { lastTickAt: string }).lastTickAt);
    expect(Math.abs(Date.now() - lastTickAt.getTime())).toBeLessThan(60_000);
  });

  it('answers a bad environment with a 500 that names the variable but not its value', async () => {
    const secret = 'hunter2-should-never-leak';
    const broken = new Miniflare(workerOptions(fixture, 'broken', { DATABASE_URL: `not a url ${secret}`, LUNANEXA_RUNTIME_TTL_MS: 'soon' }));
    try {
      const response = await broken.dispatchFetch(`${BASE}/healthz`);
      expect(response.status).toBe(500);
      const text = await response.text();
      expect(text).not.toContain(secret);
      const body = JSON.parse(text) as ErrorEnvelope;
      expect(body.error.code).toBe('invalid_environment');
      expect(body.error.details).toMatchObject({ variables: ['DATABASE_URL', 'LUNANEXA_RUNTIME_TTL_MS'] });
    } finally {
      await broken.dispose();
    }
  });

  it('refuses to serve without DATABASE_URL, with a 500 envelope that names the missing binding and how to set it', async () => {
    const bare = new Miniflare(workerOptions(fixture, 'bare', { LUNANEXA_LOG_LEVEL: 'silent' }));
    try {
      for (const path of ['/healthz', '/api/v1/machines', '/v1/models', '/agent/v1/jwks']) {
        const response = await bare.dispatchFetch(`${BASE}${path}`);
        expect(response.status).toBe(500);
        expect(response.headers.get('content-type')).toMatch(/^application\/json/);
        expect(response.headers.get('x-content-type-options')).toBe('nosniff');
        const body = (await response.json()) as ErrorEnvelope;
        expect(body.error.code).toBe('invalid_environment');
        expect(body.error.message).toContain('DATABASE_URL is not set');
        expect(body.error.message).toContain('wrangler secret put DATABASE_URL');
        expect(body.error.details).toMatchObject({ variables: ['DATABASE_URL'], issues: [{ variable: 'DATABASE_URL', code: 'missing' }] });
      }
    } finally {
      await bare.dispose();
    }
  });

  it('has a test proxy that refuses non-loopback targets', async () => {
    const ws = new WebSocket(`ws://${fixture.proxy.address}?address=10.1.2.3:5432`);
    const status = await new Promise<number>((resolve) => {
      ws.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
      ws.on('open', () => resolve(101));
      ws.on('error', () => resolve(-1));
    });
    ws.terminate();
    expect(status).toBe(403);
    expect(fixture.proxy.refused).toContain('10.1.2.3:5432');
  });
});
