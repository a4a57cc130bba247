import { request } from 'node:http';
import { and, eq, sql } from 'drizzle-orm';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { seedDemoDeployment } from '../../functions/hosts/dev/fleet.js';
import { createApiToken } from '../../functions/services/api-tokens.js';
import { apiTokens, auditEvents, consoleSessions, deployments } from '../../functions/store/schema/index.js';
import { describePg } from '../helpers/pg.js';
import { startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';
import { liveConsoleStreams } from '../../functions/api/console/sse.js';
import { SseReader } from '../helpers/sse.js';

/**
 * The console's session and form rules without a browser (the browser suite is test/e2e/console.test.ts): who may
 * sign in, how long a session lives, what ends it, and what a form must carry before anything changes.
 */
describePg('console sessions and forms', () => {
  let plane: TestPlane;
  const form = 'application/x-www-form-urlencoded';

  /** The sign-in form's nonce and cookie, as a browser gets them. */
  async function signInForm(): Promise<{ nonce: string; cookie: string }> {
    const page = await fetch(`${plane.url}/console/sign-in`);
    const nonce = /name="_csrf" value="([^"]+)"/.exec(await page.text())![1]!;
    return {
      nonce,
      cookie: page.headers
        .getSetCookie()
        .find((c) => c.startsWith('lnx_sign_in='))!
        .split(';')[0]!,
    };
  }

  async function postSignIn(token: string, headers: Record<string, string> = {}) {
    const { nonce, cookie } = await signInForm();
    return await fetch(`${plane.url}/console/sign-in`, {
      method: 'POST',
      redirect: 'manual',
      headers: { cookie, 'content-type': form, origin: plane.url, 'sec-fetch-site': 'same-origin', ...headers },
      body: new URLSearchParams({ _csrf: nonce, token }),
    });
  }

  /** Signs in; the session cookie (name=value) and its Set-Cookie line. */
  async function signIn(token: string) {
    const response = await postSignIn(token);
    expect(response.status).toBe(303);
    const line = response.headers.getSetCookie().find((c) => c.startsWith('lnx_session='))!;
    return { cookie: line.split(';')[0]!, line };
  }

  async function csrfOf(cookie: string): Promise<string> {
    const page = await fetch(`${plane.url}/console/deployments`, { headers: { cookie } });
    return /name="_csrf" value="([^"]+)"/.exec(await page.text())![1]!;
  }

  const opens = async (cookie: string) => (await fetch(`${plane.url}/`, { headers: { cookie }, redirect: 'manual' })).status === 200;

  beforeAll(async () => {
    plane = await startTestPlane({ store: 'pg' });
    await seedDemoDeployment(plane, 1);
  });
  afterAll(async () => await plane?.stop());

  it('bounds a session by 12 hours and by its token, and refuses inference and unknown tokens', async () => {
    const { line } = await signIn(plane.adminToken);
    expect(line).toMatch(/; HttpOnly/);
    expect(line).toMatch(/; SameSite=Strict/);
    expect(line).not.toMatch(/; Secure/);
    expect(Number(/Max-Age=(\d+)/.exec(line)![1])).toBeLessThanOrEqual(12 * 3600);

    const short = await createApiToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name: 'short', role: 'viewer', ttlSeconds: 120 } });
    const bounded = await signIn(short.token);
    expect(Number(/Max-Age=(\d+)/.exec(bounded.line)![1])).toBeLessThanOrEqual(120);
    const [row] = await plane.ports.store.db
      .select({ session: consoleSessions.expiresAt, token: apiTokens.expiresAt })
      .from(consoleSessions)
      .innerJoin(apiTokens, eq(apiTokens.id, consoleSessions.tokenId))
      .where(eq(consoleSessions.tokenId, short.id));
    expect(row!.session.getTime()).toBeLessThanOrEqual(row!.token!.getTime());

    const inference = await createApiToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name: 'client', role: 'inference' } });
    const refused = await postSignIn(inference.token);
    expect(refused.status).toBe(403);
    expect(await refused.text()).toContain('Inference tokens cannot sign in');
    expect(refused.headers.getSetCookie().some((c) => c.startsWith('lnx_session='))).toBe(false);
    expect(await plane.ports.store.db.select().from(consoleSessions).where(eq(consoleSessions.tokenId, inference.id))).toHaveLength(0);

    const unknown = await postSignIn('lnx_not-a-token');
    expect(unknown.status).toBe(401);
    expect(await unknown.text()).toContain('unknown, expired or revoked');
  });

  it('sets Secure on a host other than loopback, and refuses a sign-in form without its nonce or from another site', async () => {
    const { nonce, cookie } = await signInForm();
    const body = new URLSearchParams({ _csrf: nonce, token: plane.adminToken }).toString();
    // As a browser reaching the control plane by name: Node's client lets the Host header be set.
    const line = await new Promise<string | undefined>((resolve, reject) => {
      const req = request(
        `${plane.url}/console/sign-in`,
        { method: 'POST', headers: { host: 'console.example:443', cookie, 'content-type': form, 'sec-fetch-site': 'same-origin' } },
        (res) => {
          res.resume();
          resolve(res.headers['set-cookie']?.find((c) => c.startsWith('lnx_session=')));
        },
      );
      req.on('error', reject);
      req.end(body);
    });
    expect(line).toMatch(/; Secure/);

    const noNonce = await fetch(`${plane.url}/console/sign-in`, {
      method: 'POST',
      redirect: 'manual',
      headers: { 'content-type': form },
      body: new URLSearchParams({ token: plane.adminToken }),
    });
    expect(noNonce.status).toBe(403);
    const crossSite = await postSignIn(plane.adminToken, { 'sec-fetch-site': 'cross-site', origin: 'https://evil.example' });
    expect(crossSite.status).toBe(403);
    const forgedCookie = await fetch(`${plane.url}/`, { headers: { cookie: 'lnx_session=abc.def' }, redirect: 'manual' });
    expect(forgedCookie.status).toBe(303);
  });

  it('validates every form before it changes anything, and never changes state on GET', async () => {
    const { cookie } = await signIn(plane.adminToken);
    const csrf = await csrfOf(cookie);
    const generation = async () =>
      (await plane.ports.store.db.select({ generation: deployments.generation, replicas: deployments.replicas }).from(deployments))[0]!;
    const before = await generation();
    const post = (path: string, body: Record<string, string>, type = form) =>
      fetch(`${plane.url}${path}`, {
        method: 'POST',
        redirect: 'manual',
        headers: { cookie, 'content-type': type, origin: plane.url },
        body: new URLSearchParams(body),
      });

    for (const replicas of ['', 'two', '-1', '1.5', '5000']) {
      const response = await post('/console/deployments/sim-chat/scale', { _csrf: csrf, replicas, generation: String(before.generation) });
      expect(response.status, replicas).toBe(400);
      expect(response.headers.get('content-type')).toMatch(/^text\/html/);
      expect(await response.text()).toContain('Replicas must be a whole number from 0 to 1024.');
    }
    expect((await post('/console/deployments/sim-chat/scale', { replicas: '3', generation: String(before.generation) })).status).toBe(403);
    expect(
      (await post('/console/deployments/sim-chat/scale', { _csrf: csrf, replicas: '3', generation: String(before.generation) }, 'application/json')).status,
    ).toBe(415);
    expect((await post('/console/deployments/sim-chat/scale', { _csrf: csrf, replicas: '3', generation: String(before.generation + 7) })).status).toBe(409);
    expect((await post('/console/deployments/sim-chat/scale', { _csrf: `${csrf}x`, replicas: '3', generation: String(before.generation) })).status).toBe(403);
    expect((await post('/console/tokens', { _csrf: csrf, name: '', role: 'viewer', lifetime: 'never' })).status).toBe(400);
    expect((await post('/console/tokens', { _csrf: csrf, name: 'x', role: 'root', lifetime: 'never' })).status).toBe(400);
    expect((await post('/console/tokens', { _csrf: csrf, name: 'x', role: 'viewer', lifetime: 'never', rateLimitPerMinute: '10' })).status).toBe(400);
    expect((await fetch(`${plane.url}/console/machines/mch_x/drain`, { headers: { cookie } })).status).toBe(404);
    expect(await generation()).toEqual(before);

    // And a valid one goes through the same verb as the API, audited with the session's token as actor.
    const scaled = await post('/console/deployments/sim-chat/scale', { _csrf: csrf, replicas: '2', generation: String(before.generation) });
    expect(scaled.status).toBe(303);
    expect((await generation()).replicas).toBe(2);
    const [entry] = await plane.ports.store.db
      .select({ actor: auditEvents.actor, action: auditEvents.action })
      .from(auditEvents)
      .where(eq(auditEvents.action, 'deployment.update'))
      .orderBy(sql`${auditEvents.seq} desc`)
      .limit(1);
    const [admin] = await plane.ports.store.db.select({ id: apiTokens.id }).from(apiTokens).where(eq(apiTokens.name, 'bootstrap admin'));
    expect(entry).toEqual({ actor: admin!.id, action: 'deployment.update' });
  });

  it('ends a session when it expires or its token is revoked, and closes its live stream', async () => {
    const expiring = await signIn(plane.adminToken);
    expect(await opens(expiring.cookie)).toBe(true);
    await plane.ports.store.db.execute(sql`update console_sessions set expires_at = now() - interval '1 second' where ended_at is null and expires_at > now()`);
    expect(await opens(expiring.cookie)).toBe(false);

    const viewer = await createApiToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name: 'revoked soon', role: 'viewer' } });
    const { cookie } = await signIn(viewer.token);
    const controller = new AbortController();
    const stream = await fetch(`${plane.url}/console/events?view=deployments`, { headers: { cookie }, signal: controller.signal });
    expect(stream.status).toBe(200);
    const reader = new SseReader(stream.body!);
    expect(await reader.nextEvent(5_000)).toMatchObject({ event: 'hello' });
    expect((await plane.admin(`/api/v1/tokens/${viewer.id}`, { method: 'DELETE' })).status).toBe(200);
    expect(await opens(cookie)).toBe(false);
    // The stream says so within a round and ends.
    let item;
    do item = await reader.nextEvent(5_000);
    while (item && item.event !== 'session');
    expect(item).toMatchObject({ event: 'session', data: '{"state":"ended"}' });
    expect(await reader.nextEvent(5_000)).toBeNull();
    controller.abort();
    expect((await fetch(`${plane.url}/console/events?view=fleet`, { headers: { cookie } })).status).toBe(401);
  });

  it('stops a live stream when its client leaves, and refuses an unknown view', async () => {
    const { cookie } = await signIn(plane.adminToken);
    expect((await fetch(`${plane.url}/console/events?view=secrets`, { headers: { cookie } })).status).toBe(400);
    await waitFor(async () => liveConsoleStreams() === 0, { what: 'no live stream left from before' });
    const controller = new AbortController();
    const stream = await fetch(`${plane.url}/console/events?view=fleet`, { headers: { cookie }, signal: controller.signal });
    const reader = new SseReader(stream.body!);
    expect(await reader.nextEvent(5_000)).toMatchObject({ event: 'hello' });
    expect(await reader.nextEvent(5_000)).toMatchObject({ event: 'fragment' });
    expect(liveConsoleStreams()).toBe(1);
    controller.abort();
    await waitFor(async () => liveConsoleStreams() === 0, { timeoutMs: 5_000, what: 'the stream stopped' });
  });
  it('audits a console request refused for its role (access.denied), as the API does', async () => {
    const viewer = await createApiToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name: 'refused watcher', role: 'viewer' } });
    const { cookie } = await signIn(viewer.token);
    const csrf = await csrfOf(cookie);
    expect((await fetch(`${plane.url}/console/tokens`, { headers: { cookie } })).status).toBe(403);
    expect((await fetch(`${plane.url}/console/audit`, { headers: { cookie } })).status).toBe(403);
    const cordon = await fetch(`${plane.url}/console/machines/mch_x/cordon`, {
      method: 'POST',
      redirect: 'manual',
      headers: { cookie, 'content-type': form, origin: plane.url },
      body: new URLSearchParams({ _csrf: csrf }),
    });
    expect(cordon.status).toBe(403);
    const cancel = await fetch(`${plane.url}/console/runs/run_x/cancel`, {
      method: 'POST',
      redirect: 'manual',
      headers: { cookie, 'content-type': form, origin: plane.url },
      body: new URLSearchParams({ _csrf: csrf }),
    });
    expect(cancel.status).toBe(403);
    const denied = await plane.ports.store.db
      .select({ target: auditEvents.target, outcome: auditEvents.outcome, details: auditEvents.details })
      .from(auditEvents)
      .where(and(eq(auditEvents.action, 'access.denied'), eq(auditEvents.actor, viewer.id)))
      .orderBy(auditEvents.target);
    expect(denied).toEqual([
      { target: 'GET /console/audit', outcome: 'denied', details: { role: 'viewer', required: 'admin' } },
      { target: 'GET /console/tokens', outcome: 'denied', details: { role: 'viewer', required: 'admin' } },
      { target: 'POST /console/machines/:id/cordon', outcome: 'denied', details: { role: 'viewer', required: 'operator' } },
      { target: 'POST /console/runs/:id/cancel', outcome: 'denied', details: { role: 'viewer', required: 'operator' } },
    ]);
  });

  it('caps live streams per session and per token, and renders a view once per tick however many streams show it', async () => {
    await waitFor(async () => liveConsoleStreams() === 0, { what: 'no live stream left from before' });
    const tabs = await createApiToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name: 'many tabs', role: 'viewer' } });
    const someoneElse = await createApiToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name: 'someone else', role: 'viewer' } });
    const [first, second, third, other] = [await signIn(tabs.token), await signIn(tabs.token), await signIn(tabs.token), await signIn(someoneElse.token)];
    const controller = new AbortController();
    const open = (cookie: string, view = 'fleet') => fetch(`${plane.url}/console/events?view=${view}`, { headers: { cookie }, signal: controller.signal });
    const readers: SseReader[] = [];
    const opened = async (cookie: string, view = 'fleet') => {
      const response = await open(cookie, view);
      if (response.status !== 200) expect.fail(`${response.status}: ${await response.text()}`);
      const reader = new SseReader(response.body!);
      readers.push(reader);
      return reader;
    };
    try {
      // One session: six streams, the seventh refused (429, saying why); its other streams go on.
      for (let i = 0; i < 6; i += 1) await opened(first.cookie);
      const overSession = await open(first.cookie);
      expect(overSession.status).toBe(429);
      expect(await overSession.text()).toContain('live pages open in this session');
      // One token: twelve streams over its sessions, the thirteenth refused.
      for (let i = 0; i < 6; i += 1) await opened(second.cookie);
      const overToken = await open(third.cookie);
      expect(overToken.status).toBe(429);
      expect(await overToken.text()).toContain('live pages open with this token');
      // Someone else still gets their live page.
      const elsewhere = await opened(other.cookie);
      expect(await elsewhere.nextEvent(5_000)).toMatchObject({ event: 'hello' });
      expect(liveConsoleStreams()).toBe(13);

      // Thirteen streams of one view, workspace and role: one render per tick, not thirteen.
      const renders = async () => (await plane.ports.metrics.consoleRenders.get()).values.find((v) => v.labels.view === 'fleet')?.value ?? 0;
      await new Promise((resolve) => setTimeout(resolve, 2_000));
      const before = await renders();
      await new Promise((resolve) => setTimeout(resolve, 4_500));
      const during = (await renders()) - before;
      expect(during).toBeGreaterThanOrEqual(2);
      expect(during).toBeLessThanOrEqual(4);
      for (const reader of readers) {
        let item;
        do item = await reader.nextEvent(5_000);
        while (item && item.event !== 'fragment');
        expect(item).toMatchObject({ event: 'fragment' });
      }

      // A shared render still carries each session's own CSRF token in its forms (the operator's scale form).
      const operator = await createApiToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name: 'shared hands', role: 'operator' } });
      for (const session of [await signIn(operator.token), await signIn(operator.token)]) {
        const reader = await opened(session.cookie, 'deployments');
        let item;
        do item = await reader.nextEvent(5_000);
        while (item && item.event !== 'fragment');
        const { html } = JSON.parse(item!.data) as { html: string };
        expect(html).toContain(`name="_csrf" value="${await csrfOf(session.cookie)}"`);
      }
    } finally {
      controller.abort();
    }
    await waitFor(async () => liveConsoleStreams() === 0, { timeoutMs: 5_000, what: 'the streams stopped' });
    // Once its streams closed, the session gets a live page again.
    const again = new AbortController();
    expect((await fetch(`${plane.url}/console/events?view=fleet`, { headers: { cookie: first.cookie }, signal: again.signal })).status).toBe(200);
    again.abort();
    await waitFor(async () => liveConsoleStreams() === 0, { timeoutMs: 5_000, what: 'the last stream stopped' });
  }, 60_000);
});
