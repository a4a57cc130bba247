import { and, asc, eq, sql } from 'drizzle-orm';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createApiToken } from '../../functions/services/api-tokens.js';
import { auditEvents } from '../../functions/store/schema/index.js';
import { queryRows } from '../../functions/store/rows.js';
import { createTestDatabase, describePg } from '../helpers/pg.js';
import { startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';

/**
 * The weakest token against the audit log (second security review, M5): each refused management request appended
 * one chained `access.denied` entry, with no rate limit (2,000 entries in 19 s from an inference token). Refusals
 * are now recorded once per token, route and minute, with one more entry counting them when the minute had more;
 * and management requests are rate-limited per token, exactly across instances (docs/security.md, "Rate limits").
 */

/** What the planes allow each token per minute on the management API (the default is far higher). */
const LIMIT = 100;

describePg('access.denied floods and management rate limits (security review 2, M5)', () => {
  let database: { url: string; drop(): Promise<void> };
  let a: TestPlane;
  let b: TestPlane;
  const db = () => a.systemCtx.db;

  const get = (plane: TestPlane, path: string, token: string) => fetch(`${plane.url}${path}`, { headers: { authorization: `Bearer ${token}` } });
  /** `n` requests of `token` to `path`, alternating between the two instances, a few at a time; their statuses. */
  const flood = async (n: number, path: string, token: string): Promise<Record<number, number>> => {
    const counts: Record<number, number> = {};
    for (let i = 0; i < n; i += 8) {
      const batch = await Promise.all(
        Array.from({ length: Math.min(8, n - i) }, async (_, j) => {
          const response = await get((i + j) % 2 === 0 ? a : b, path, token);
          await response.arrayBuffer();
          return response.status;
        }),
      );
      for (const status of batch) counts[status] = (counts[status] ?? 0) + 1;
    }
    return counts;
  };
  const deniedEntries = async (tokenId: string) =>
    await db()
      .select({ target: auditEvents.target, outcome: auditEvents.outcome, details: auditEvents.details })
      .from(auditEvents)
      .where(and(eq(auditEvents.actor, tokenId), eq(auditEvents.action, 'access.denied')))
      .orderBy(asc(auditEvents.seq));
  /** Waits for a fresh minute when this one is about to end: what follows must land in one window. */
  const freshWindow = async () => {
    const [left] = await queryRows<{ s: number | string }>(
      db(),
      sql`select extract(epoch from (date_trunc('minute', now()) + interval '1 minute' - now()))::float8 as s`,
    );
    if (Number(left!.s) < 20) await new Promise((resolve) => setTimeout(resolve, Number(left!.s) * 1000 + 100));
  };

  beforeAll(async () => {
    database = await createTestDatabase();
    a = await startTestPlane({ store: 'pg', databaseUrl: database.url, config: { managementRateLimitPerMinute: LIMIT } });
    b = await startTestPlane({ store: 'pg', databaseUrl: database.url, config: { managementRateLimitPerMinute: LIMIT } });
  }, 60_000);

  afterAll(async () => {
    await b?.stop();
    await a?.stop();
    await database?.drop();
  });

  it("an inference token's flood of refused requests adds one entry per route and minute, then one that counts them", async () => {
    const inference = await createApiToken({ ctx: a.systemCtx, input: { workspaceId: a.workspaceId, name: 'app', role: 'inference' } });
    await freshWindow();
    expect(await flood(60, '/api/v1/machines', inference.token)).toEqual({ 403: 60 });
    expect(await flood(20, '/api/v1/tokens', inference.token)).toEqual({ 403: 20 });
    expect(await deniedEntries(inference.id)).toEqual([
      { target: 'GET /api/v1/machines', outcome: 'denied', details: { role: 'inference', required: 'viewer' } },
      { target: 'GET /api/v1/tokens', outcome: 'denied', details: { role: 'inference', required: 'admin' } },
    ]);

    // The minute ends (its windows moved back a minute, as the clock would): a controller tick, on whichever
    // instance, records how many refusals each window had, once.
    await db().execute(sql`update token_rate_windows set window_start = window_start - interval '1 minute'`);
    const entries = await waitFor(
      async () => {
        const rows = await deniedEntries(inference.id);
        return rows.length >= 4 ? rows : null;
      },
      { timeoutMs: 10_000, what: 'the summaries of the minute' },
    );
    const summaries = entries.slice(2).map((e) => ({ target: e.target, count: e.details.count, role: e.details.role, required: e.details.required }));
    expect(summaries.sort((x, y) => x.target.localeCompare(y.target))).toEqual([
      { target: 'GET /api/v1/machines', count: 60, role: 'inference', required: 'viewer' },
      { target: 'GET /api/v1/tokens', count: 20, role: 'inference', required: 'admin' },
    ]);
    for (const summary of entries.slice(2)) expect(typeof summary.details.windowStart).toBe('string');
    // Recorded once: later ticks add nothing, and the chain still verifies.
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    expect(await deniedEntries(inference.id)).toHaveLength(4);
    const verified = (await (await a.admin('/api/v1/audit/verify')).json()) as { ok: boolean };
    expect(verified.ok).toBe(true);
  });

  it('limits management requests per token exactly across instances: 429 with Retry-After in the management envelope', async () => {
    const viewer = await createApiToken({ ctx: a.systemCtx, input: { workspaceId: a.workspaceId, name: 'dashboard', role: 'viewer' } });
    await freshWindow();
    expect(await flood(LIMIT, '/api/v1/deployments', viewer.token)).toEqual({ 200: LIMIT });
    for (const plane of [a, b]) {
      const refused = await get(plane, '/api/v1/deployments', viewer.token);
      expect(refused.status).toBe(429);
      const retryAfter = Number(refused.headers.get('retry-after'));
      expect(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 60, `Retry-After ${refused.headers.get('retry-after')}`).toBe(true);
      const body = (await refused.json()) as { error: { code: string; message: string; requestId: string; details: { retryAfterS: number } } };
      expect(body.error).toMatchObject({ code: 'rate_limit_exceeded', details: { retryAfterS: retryAfter } });
      expect(body.error.message).toContain(`${LIMIT} management requests per minute`);
    }
    // Another token is not affected.
    expect((await a.admin('/api/v1/deployments')).status).toBe(200);
  });

  it("an inference token's own rate limit bounds its management requests too, and refused ones past it are not audited", async () => {
    const limited = await createApiToken({
      ctx: a.systemCtx,
      input: { workspaceId: a.workspaceId, name: 'five a minute', role: 'inference', rateLimitPerMinute: 5 },
    });
    await freshWindow();
    expect(await flood(30, '/api/v1/machines', limited.token)).toEqual({ 403: 5, 429: 25 });
    expect(await deniedEntries(limited.id)).toHaveLength(1);
    // Its /v1 budget is its own: the management refusals did not spend it.
    expect((await get(b, '/v1/models', limited.token)).status).toBe(200);
  });
});
