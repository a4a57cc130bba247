import { and, eq } from 'drizzle-orm';
import { afterAll, beforeAll, beforeEach, expect, it } from 'vitest';
import { createApiToken, revokeApiToken } from '../../functions/services/api-tokens.js';
import { auditEvents, tokenRateWindows } from '../../functions/store/schema/index.js';
import { describePg } from '../helpers/pg.js';
import { startTestPlane, type TestPlane } from '../helpers/plane.js';

/** Sign-in failures are recorded (audited where the token is known, counted where it is not) and attempts are throttled per client address. */
describePg('console sign-in: failures recorded, attempts throttled', () => {
  let plane: TestPlane;
  const LIMIT = 3;

  /** The sign-in form's nonce and cookie, as a browser gets them. */
  async function signInForm(): Promise<{ nonce: string; cookie: string }> {
    const page = await fetch(`${plane.url}/console/sign-in`);
    const nonce = /name="_csrf" value="([^"]+)"/.exec(await page.text())![1]!;
    const cookie = page.headers
      .getSetCookie()
      .find((c) => c.startsWith('lnx_sign_in='))!
      .split(';')[0]!;
    return { nonce, cookie };
  }

  async function postSignIn(token: string, form?: { nonce: string; cookie: string }) {
    const { nonce, cookie } = form ?? (await signInForm());
    return await fetch(`${plane.url}/console/sign-in`, {
      method: 'POST',
      redirect: 'manual',
      headers: { cookie, 'content-type': 'application/x-www-form-urlencoded', origin: plane.url, 'sec-fetch-site': 'same-origin' },
      body: new URLSearchParams({ _csrf: nonce, token }),
    });
  }

  const failures = async (reason: string) => (await plane.ports.metrics.consoleSignInFailures.get()).values.find((v) => v.labels.reason === reason)?.value ?? 0;

  beforeAll(async () => {
    plane = await startTestPlane({ store: 'pg', config: { consoleSignInPerMinute: LIMIT } });
  });
  afterAll(async () => await plane?.stop());
  beforeEach(async () => {
    // A window of one minute: not near its end, so that the attempts of a test count in one window.
    // (the database runs on this host: its clock is this one)
    const second = new Date().getUTCSeconds();
    if (second > 45) await new Promise((resolve) => setTimeout(resolve, (61 - second) * 1000));
    await plane.ports.store.db.delete(tokenRateWindows);
  });

  it('counts an unknown token in a metric, and audits a revoked or inference token in its workspace, never writing the token', async () => {
    const before = await failures('unknown');
    expect((await postSignIn('lnx_unknown_secret_value')).status).toBe(401);
    expect(await failures('unknown')).toBe(before + 1);

    const viewer = await createApiToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name: 'gone', role: 'viewer' } });
    await revokeApiToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, tokenId: viewer.id } });
    expect((await postSignIn(viewer.token)).status).toBe(401);
    const inference = await createApiToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name: 'calls', role: 'inference' } });
    await plane.ports.store.db.delete(tokenRateWindows);
    expect((await postSignIn(inference.token)).status).toBe(403);

    const entries = await plane.ports.store.db
      .select()
      .from(auditEvents)
      .where(and(eq(auditEvents.workspaceId, plane.workspaceId), eq(auditEvents.action, 'console.sign-in-failed')));
    expect(entries.map((e) => [e.target, e.outcome, e.details])).toEqual([
      [viewer.id, 'denied', { reason: 'revoked' }],
      [inference.id, 'denied', { reason: 'inference' }],
    ]);
    expect(JSON.stringify(entries)).not.toContain(viewer.token);
  });

  it('takes a sign-in form once: a second attempt with its nonce is refused 403, after a failure or a success (I-4)', async () => {
    const failed = await signInForm();
    expect((await postSignIn('lnx_wrong', failed)).status).toBe(401);
    const again = await postSignIn(plane.adminToken, failed);
    expect(again.status).toBe(403);
    expect(await again.text()).toContain('this sign-in form was sent already');
    expect(again.headers.getSetCookie().some((c) => c.startsWith('lnx_session='))).toBe(false);

    // Four attempts: more than this suite's limit a minute.
    await plane.ports.store.db.delete(tokenRateWindows);
    const succeeded = await signInForm();
    expect((await postSignIn(plane.adminToken, succeeded)).status).toBe(303);
    expect((await postSignIn(plane.adminToken, succeeded)).status).toBe(403);
  });

  it(`throttles sign-in attempts per client address: past ${LIMIT} a minute, 429 with Retry-After on the sign-in page`, async () => {
    for (let i = 0; i < LIMIT; i++) expect((await postSignIn('lnx_wrong')).status).toBe(401);
    const refused = await postSignIn(plane.adminToken);
    expect(refused.status).toBe(429);
    const retryAfter = Number(refused.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(60);
    const body = await refused.text();
    expect(body).toContain('Too many sign-in attempts');
    expect(body).toContain('name="_csrf"');
    expect(refused.headers.getSetCookie().some((c) => c.startsWith('lnx_session='))).toBe(false);
    // Its own key space: the admin token's management requests are not counted against it.
    const keys = (await plane.ports.store.db.select({ key: tokenRateWindows.tokenId }).from(tokenRateWindows)).map((r) => r.key);
    expect(keys.every((key) => key.startsWith('sign-in:'))).toBe(true);
    // A new window lets it in again.
    await plane.ports.store.db.delete(tokenRateWindows);
    expect((await postSignIn(plane.adminToken)).status).toBe(303);
  });
});
