import { copyFile, mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { afterAll, beforeAll, expect, it } from 'vitest';
import OpenAI, { toFile } from 'openai';
import { ensureJobTemplates, seedDemoDeployment, startSimNode, stopSimNodes, type SimNode } from '../../functions/hosts/dev/fleet.js';
import { createApiToken } from '../../functions/services/api-tokens.js';
import type { MachineView } from '../../shared/contracts/machine.js';
import type { RunDetail } from '../../shared/contracts/run-view.js';
import { describePg } from '../helpers/pg.js';
import { startTestPlane, STEADY_LIVENESS, waitFor, type TestPlane } from '../helpers/plane.js';

/**
 * The web console in a real headless Chromium (Debian's, never a downloaded one) against a real control plane with
 * four simulated nodes (real agent processes): sign-in and its cookie, the fleet and deployments live over SSE
 * while a machine drains, requests with their charts, tokens created and revoked, CSRF and role refusals, sign-out.
 * Screenshots of a laptop and a phone go to test-results/console/; with UPDATE_DOCS_SCREENSHOT=1 the laptop's fleet
 * also replaces docs/console.png (the README's), which otherwise stays as committed.
 */
const SHOTS = join(process.cwd(), 'test-results', 'console');
const LAPTOP = { width: 1366, height: 900 };
const PHONE = { width: 390, height: 844 };

describePg('web console (headless Chromium, four simulated nodes)', () => {
  let plane: TestPlane;
  let nodes: SimNode[] = [];
  let browser: Browser;
  let admin: BrowserContext;
  let viewerToken: { id: string; token: string };

  const machines = async (): Promise<MachineView[]> => ((await (await plane.admin('/api/v1/machines')).json()) as { data: MachineView[] }).data;
  const url = (path: string) => `${plane.url}${path}`;

  async function signIn(context: BrowserContext, token: string): Promise<Page> {
    const page = await context.newPage();
    await page.goto(url('/'));
    // No session: the console sends the browser to its sign-in form.
    expect(new URL(page.url()).pathname).toBe('/console/sign-in');
    await page.getByLabel('API token').fill(token);
    await Promise.all([page.waitForURL(url('/')), page.getByRole('button', { name: 'Sign in' }).click()]);
    return page;
  }

  /** Waits until the page's live stream said hello (its status line says so). */
  async function live(page: Page) {
    await page.locator('#live-status', { hasText: 'Live updates on.' }).waitFor({ timeout: 10_000 });
  }

  /** A POST from inside the page (same origin, the session's cookie): its status. */
  async function postFrom(page: Page, path: string, fields: Record<string, string>): Promise<number> {
    return await page.evaluate(
      async ({ path, fields }) => (await fetch(path, { method: 'POST', body: new URLSearchParams(fields), redirect: 'manual' })).status,
      { path, fields },
    );
  }

  beforeAll(async () => {
    // Steady liveness: Chromium and four agents share two cores; nothing here is about heartbeat timing.
    // Telemetry kept every second (10 s by default), so that the GPU charts have samples within the test.
    plane = await startTestPlane({ store: 'pg', config: { ...STEADY_LIVENESS, telemetrySampleMs: 1_000 } });
    await seedDemoDeployment(plane, 2, { loadMs: 100 });
    const names = ['dgx-1', 'dgx-2', 'dgx-3', 'dgx-4'];
    const nodesDir = join(plane.dataDir, 'nodes');
    [nodes, browser] = await Promise.all([
      // Sampling their GPU every 5 s, as `npm start`'s do, so that the GPU charts have samples within a test.
      Promise.all(names.map((name) => startSimNode(plane, name, nodesDir, { telemetryMs: 5_000 }))),
      chromium.launch({
        executablePath: '/usr/bin/chromium',
        // No sandbox as root; and nothing reaching out from a machine without a network, which only slows a start.
        args: [
          '--no-sandbox',
          '--disable-gpu',
          '--disable-quic',
          '--no-first-run',
          '--disable-background-networking',
          '--disable-component-update',
          '--disable-sync',
        ],
      }),
    ]);
    const created = await createApiToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name: 'console viewer', role: 'viewer' } });
    viewerToken = { id: created.id, token: created.token };
    await waitFor(
      async () => {
        const list = await machines();
        return list.length === 4 && list.every((m) => m.state === 'ready') && list.flatMap((m) => m.runtimes).filter((r) => r.routable).length === 2;
      },
      { timeoutMs: 60_000, what: 'four ready machines, two sim-chat replicas serving' },
    );
    await mkdir(SHOTS, { recursive: true });
    admin = await browser.newContext({ viewport: LAPTOP });
  }, 120_000);

  afterAll(async () => {
    await browser?.close();
    await stopSimNodes(nodes);
    await plane?.stop();
  });

  it('signs in with the admin token: an HttpOnly, SameSite=Strict session cookie, and four machines', async () => {
    const page = await signIn(admin, plane.adminToken);
    const [cookie] = (await admin.cookies(plane.url)).filter((c) => c.name === 'lnx_session');
    expect(cookie).toMatchObject({ httpOnly: true, sameSite: 'Strict', path: '/' });
    // Loopback is the one place it may go without Secure (the browser would drop a Secure cookie on plain http elsewhere).
    expect(cookie!.secure).toBe(false);
    expect(cookie!.expires - Date.now() / 1000).toBeLessThanOrEqual(12 * 3600 + 5);
    expect(await page.evaluate(() => document.cookie)).not.toContain('lnx_session');
    const csp = (await page.request.get(url('/'))).headers()['content-security-policy'];
    expect(csp).toContain("script-src 'self'");
    expect(csp).not.toContain('unsafe-inline');

    const rows = page.locator('tr[data-machine]');
    expect(await rows.count()).toBe(4);
    expect((await rows.evaluateAll((trs) => trs.map((tr) => (tr as HTMLElement).dataset.machine))).sort()).toEqual(['dgx-1', 'dgx-2', 'dgx-3', 'dgx-4']);
    expect(await page.locator('tr[data-machine][data-state="ready"]').count()).toBe(4);
    await expect(page.locator('main h1').textContent()).resolves.toBe('Fleet');
    // Landmarks and a labelled navigation, the current page marked.
    expect(await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Fleet' }).getAttribute('aria-current')).toBe('page');
    await live(page);
    await page.screenshot({ path: join(SHOTS, 'fleet-laptop.png'), fullPage: true });
    if (process.env.UPDATE_DOCS_SCREENSHOT === '1') await copyFile(join(SHOTS, 'fleet-laptop.png'), join(process.cwd(), 'docs', 'console.png'));
    await page.close();
  });

  it('drains a machine and shows, live and without a reload, its replica move to another machine', async () => {
    const before = await machines();
    const victim = before.find((m) => m.runtimes.some((r) => r.deploymentName === 'sim-chat' && r.desired))!;
    const fleet = await admin.newPage();
    await fleet.goto(url('/'));
    const deployments = await admin.newPage();
    await deployments.goto(url('/console/deployments'));
    await Promise.all([live(fleet), live(deployments)]);
    // Marks on the window: a reload or navigation would wipe them.
    await deployments.evaluate(() => ((window as unknown as { stayed: boolean }).stayed = true));
    const replicaMachines = () =>
      deployments
        .locator('[data-deployment="sim-chat"] tr[data-replica-machine][data-desired="true"]')
        .evaluateAll((trs) => trs.map((tr) => (tr as HTMLElement).dataset.replicaMachine));
    expect(await replicaMachines()).toContain(victim.name);

    fleet.once('dialog', (dialog) => void dialog.accept());
    await Promise.all([fleet.waitForURL(/\/\?done=drain/), fleet.locator(`#drain-${victim.id}`).click()]);
    expect(await fleet.getByRole('status').first().textContent()).toContain(`Draining ${victim.name}`);
    await live(fleet);
    await fleet.evaluate(() => ((window as unknown as { stayed: boolean }).stayed = true));

    // The deployments page was never reloaded: the stream moved the replica.
    await deployments.waitForFunction(
      (name) => {
        const card = document.querySelector('[data-deployment="sim-chat"]');
        if (!card) return false;
        const rows = [...card.querySelectorAll<HTMLElement>('tr[data-replica-machine]')];
        const serving = rows.filter((tr) => tr.dataset.desired === 'true' && tr.dataset.replicaMachine !== name);
        return rows.every((tr) => tr.dataset.replicaMachine !== name) && serving.length === 2 && card.querySelector('[data-ready]')?.textContent === '2';
      },
      victim.name,
      { timeout: 30_000, polling: 100 },
    );
    expect(await deployments.evaluate(() => (window as unknown as { stayed?: boolean }).stayed)).toBe(true);
    expect(Number(await deployments.evaluate(() => document.body.dataset.updates))).toBeGreaterThan(0);
    // And the fleet page shows the machine drained, live too.
    await fleet.locator(`tr[data-machine="${victim.name}"] .badge`, { hasText: 'drained' }).waitFor({ timeout: 15_000 });
    expect(await fleet.evaluate(() => (window as unknown as { stayed?: boolean }).stayed)).toBe(true);
    const after = await machines();
    expect(after.find((m) => m.id === victim.id)).toMatchObject({ draining: true, drained: true });
    expect(after.flatMap((m) => m.runtimes.filter((r) => r.routable).map(() => m.name)).filter((n) => n !== victim.name)).toHaveLength(2);
    await deployments.screenshot({ path: join(SHOTS, 'deployments-laptop.png'), fullPage: true });
    await fleet.close();
    await deployments.close();
  });

  it('shows requests live with TTFT and tokens/s charts, and says so honestly before there are any', async () => {
    const page = await admin.newPage();
    await page.goto(url('/console/requests'));
    expect(await page.locator('#chart-ttft-svg').getAttribute('data-points')).toBe('0');
    expect(await page.locator('#chart-ttft-svg text.empty').textContent()).toBe('no requests yet');
    await live(page);
    for (let i = 0; i < 4; i += 1) {
      const response = await fetch(url('/v1/chat/completions'), {
        method: 'POST',
        headers: { authorization: `Bearer ${plane.adminToken}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'sim-chat', messages: [{ role: 'user', content: `hello ${i}` }], max_tokens: 8, stream: true }),
      });
      expect(response.status).toBe(200);
      await response.text();
    }
    await page.locator('#requests-table tbody tr').nth(3).waitFor({ timeout: 15_000 });
    await page.waitForFunction(() => Number(document.querySelector('#chart-ttft-svg')?.getAttribute('data-points')) >= 4, undefined, { timeout: 15_000 });
    expect(Number(await page.locator('#chart-tps-svg').getAttribute('data-points'))).toBeGreaterThanOrEqual(4);
    expect(await page.locator('#chart-ttft-svg').getAttribute('role')).toBe('img');
    await page.screenshot({ path: join(SHOTS, 'requests-laptop.png'), fullPage: true });
    await page.close();
  });

  it("shows each machine's GPUs as their nodes sample them, live in the table and as charts, busier under load, and a deployment's last hour", async () => {
    // Streams longer (about 12 s at 200 tokens/s) than two of the agents' 5 s sampling periods: a sample reads them busy.
    const streams = Array.from({ length: 6 }, () =>
      fetch(url('/v1/chat/completions'), {
        method: 'POST',
        headers: { authorization: `Bearer ${plane.adminToken}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'sim-chat', messages: [{ role: 'user', content: 'load' }], max_tokens: 2_400, stream: true }),
      }).then((r) => r.text()),
    );
    const busy = await waitFor(
      async () => {
        const list = await machines();
        return list.find((m) => (m.gpus[0]?.utilizationPercent ?? 0) > 0) ?? null;
      },
      { timeoutMs: 20_000, what: 'a GPU sampled busy' },
    );
    const page = await admin.newPage();
    await page.goto(url('/'));
    const row = page.locator(`tr[data-machine="${busy.name}"] [data-gpu="0"] [data-live]`);
    expect(await row.textContent()).toMatch(/\d+% busy · .* °C · \d+ W/);
    // One section of charts per machine, three charts per GPU, each drawn from its node's kept samples.
    expect(await page.locator('section.gpu-charts').count()).toBe(4);
    const utilisation = page.locator(`svg[id="gpu-${busy.id}-0-utilizationPercent-svg"]`);
    expect(Number(await utilisation.getAttribute('data-points'))).toBeGreaterThan(0);
    expect(await utilisation.getAttribute('role')).toBe('img');
    expect(await page.locator(`svg[id="gpu-${busy.id}-0-temperatureC-svg"] desc`).textContent()).toMatch(/minutes sampled: median \d+ °C/);
    await page.screenshot({ path: join(SHOTS, 'fleet-gpus-laptop.png'), fullPage: true });
    await page.close();
    await Promise.all(streams);
    // The deployment's last hour: its queue from the nodes' samples, its TTFT p95 and tokens/s from its requests.
    const deployments = await admin.newPage();
    await deployments.goto(url('/console/deployments'));
    const charted = deployments.locator('section.deployment-charts[data-deployment="sim-chat"]');
    for (const key of ['queueDepth', 'ttftP95Ms', 'tokensPerSecond'])
      expect(Number(await charted.locator(`svg[id="deployment-sim-chat-${key}-svg"]`).getAttribute('data-points'))).toBeGreaterThan(0);
    await deployments.close();
  });

  it('creates a token whose secret is shown once, and revokes it: the API refuses it then', async () => {
    const page = await admin.newPage();
    await page.goto(url('/console/tokens'));
    await page.getByLabel('Name', { exact: true }).fill('console-e2e');
    await page.getByLabel('Role').selectOption('inference');
    await page.getByRole('button', { name: 'Create token' }).click();
    const secret = await page.locator('#new-token-secret').inputValue();
    expect(secret).toMatch(/^lnx_/);
    expect((await fetch(url('/v1/models'), { headers: { authorization: `Bearer ${secret}` } })).status).toBe(200);
    // Shown once: the list itself never carries it.
    await page.goto(url('/console/tokens'));
    expect(await page.locator('#new-token-secret').count()).toBe(0);
    expect(await page.content()).not.toContain(secret);
    await page.screenshot({ path: join(SHOTS, 'tokens-laptop.png'), fullPage: true });

    const row = page.locator('tr[data-token="console-e2e"]');
    page.once('dialog', (dialog) => void dialog.accept());
    await Promise.all([page.waitForURL(/done=revoke/), row.getByRole('button', { name: /Revoke/ }).click()]);
    expect(await page.locator('tr[data-token="console-e2e"]').getAttribute('data-state')).toBe('revoked');
    expect((await fetch(url('/v1/models'), { headers: { authorization: `Bearer ${secret}` } })).status).toBe(401);
    await page.close();
  });

  it('refuses a POST without the CSRF token or from another origin, and a viewer who drains: nothing changes', async () => {
    const page = await admin.newPage();
    await page.goto(url('/'));
    const target = (await machines()).find((m) => !m.cordoned)!;
    // Same origin, the session's cookie, no token.
    expect(await postFrom(page, `/console/machines/${target.id}/cordon`, {})).toBe(403);
    // The right token, sent from another site (what a browser says in Origin and Sec-Fetch-Site).
    const csrf = await page.locator('input[name="_csrf"]').first().inputValue();
    const cookie = (await admin.cookies(plane.url)).find((c) => c.name === 'lnx_session')!;
    const forged = await fetch(url(`/console/machines/${target.id}/cordon`), {
      method: 'POST',
      redirect: 'manual',
      headers: {
        cookie: `lnx_session=${cookie.value}`,
        origin: 'http://evil.example',
        'sec-fetch-site': 'cross-site',
        'content-type': 'application/x-www-form-urlencoded',
      },
      body: new URLSearchParams({ _csrf: csrf }),
    });
    expect(forged.status).toBe(403);
    // Bad input: a clear 400 page, nothing scaled.
    const scale = await page.evaluate(async (csrf) => {
      const response = await fetch('/console/deployments/sim-chat/scale', {
        method: 'POST',
        body: new URLSearchParams({ _csrf: csrf, replicas: '-3', generation: '1' }),
      });
      return { status: response.status, text: await response.text() };
    }, csrf);
    expect(scale.status).toBe(400);
    expect(scale.text).toContain('Replicas must be a whole number from 0 to 1024.');
    expect((await machines()).find((m) => m.id === target.id)!.cordoned).toBe(false);
    expect(((await (await plane.admin('/api/v1/deployments/sim-chat')).json()) as { replicas: number }).replicas).toBe(2);
    await page.close();

    const viewer = await browser.newContext({ viewport: LAPTOP });
    const seen = await signIn(viewer, viewerToken.token);
    expect(await seen.locator('tr[data-machine]').count()).toBe(4);
    expect(await seen.locator('button[id^="drain-"]').count()).toBe(0);
    const viewerCsrf = await seen.locator('input[name="_csrf"]').first().inputValue();
    expect(await postFrom(seen, `/console/machines/${target.id}/drain`, { _csrf: viewerCsrf })).toBe(403);
    expect((await machines()).find((m) => m.id === target.id)).toMatchObject({ cordoned: false, draining: false });
    // Admin pages are not the viewer's either.
    expect((await seen.goto(url('/console/tokens')))!.status()).toBe(403);

    // Revoking the viewer's token ends its session at once: the live page is sent to the sign-in form.
    await seen.goto(url('/'));
    await live(seen);
    expect((await plane.admin(`/api/v1/tokens/${viewerToken.id}`, { method: 'DELETE' })).status).toBe(200);
    await seen.waitForURL(/\/console\/sign-in\?ended=1/, { timeout: 10_000 });
    await viewer.close();
  });

  it('shows a run live on the runs page with its reason, its workers and events, and lets an operator cancel it', async () => {
    await ensureJobTemplates(plane);
    const operatorToken = await createApiToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name: 'console operator', role: 'operator' } });
    const operator = await browser.newContext({ viewport: LAPTOP });
    const list = await signIn(operator, operatorToken.token);
    await list.goto(url('/console/runs'));
    await live(list);
    expect(await list.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Runs' }).getAttribute('aria-current')).toBe('page');
    // Two workers of 64 GPUs each: no simulated node (one GPU each) takes one, so the run waits, saying why.
    const submitted = await plane.admin('/api/v1/runs', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'too-big', spec: { template: 'sim-job', workers: 2, resources: { gpus: 64 } } }),
    });
    expect(submitted.status).toBe(201);
    const run = (await submitted.json()) as RunDetail;
    // Live: the page was not reloaded.
    const row = list.locator('tr[data-run="too-big"]');
    await row.waitFor({ timeout: 15_000 });
    expect(await row.getAttribute('data-state')).toBe('pending');
    await row.locator('td[data-reason]', { hasText: /fit/ }).waitFor({ timeout: 15_000 });
    expect(await row.textContent()).toContain('queue position 1');
    expect(await row.textContent()).toContain('0 of 2 done');

    await Promise.all([list.waitForURL(url(`/console/runs/${run.id}`)), row.getByRole('link', { name: 'too-big' }).click()]);
    const workers = list.locator('#run-workers tbody tr');
    expect(await workers.evaluateAll((trs) => trs.map((tr) => [(tr as HTMLElement).dataset.worker, (tr as HTMLElement).dataset.state]))).toEqual([
      ['too-big-0', 'pending'],
      ['too-big-1', 'pending'],
    ]);
    await list.screenshot({ path: join(SHOTS, 'run-laptop.png'), fullPage: true });

    // A viewer sees the run but no Cancel, and is refused one.
    const viewer = await browser.newContext({ viewport: LAPTOP });
    const viewerCreated = await createApiToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name: 'runs viewer', role: 'viewer' } });
    const seen = await signIn(viewer, viewerCreated.token);
    await seen.goto(url(`/console/runs/${run.id}`));
    expect(await seen.locator('#run-workers tbody tr').count()).toBe(2);
    expect(await seen.locator('#cancel-run').count()).toBe(0);
    const viewerCsrf = await seen.locator('input[name="_csrf"]').first().inputValue();
    expect(await postFrom(seen, `/console/runs/${run.id}/cancel`, { _csrf: viewerCsrf })).toBe(403);
    await viewer.close();

    list.once('dialog', (dialog) => void dialog.accept());
    await Promise.all([list.waitForURL(/done=cancel/), list.locator('#cancel-run').click()]);
    expect(await list.getByRole('status').first().textContent()).toContain('Cancelled too-big');
    expect(await list.locator('[data-run="too-big"]').first().getAttribute('data-state')).toBe('failed');
    expect(await list.locator('#cancel-run').count()).toBe(0);
    const events = await list.locator('#run-events tbody tr').allTextContents();
    expect(events.some((e) => e.includes('run') && e.includes('pending') && e.includes('cancelled'))).toBe(true);
    const after = (await (await plane.admin(`/api/v1/runs/${run.id}`)).json()) as RunDetail;
    expect(after).toMatchObject({ state: 'failed', reason: 'cancelled' });
    expect(after.workers.map((w) => w.state)).toEqual(['failed', 'failed']);
    await operator.close();
  });

  it('shows a batch on the jobs page with its progress and its output files once it completed', async () => {
    const client = new OpenAI({ baseURL: `${plane.url}/v1`, apiKey: plane.adminToken, maxRetries: 0 });
    const lines = Array.from({ length: 12 }, (_, i) =>
      JSON.stringify({
        custom_id: `c-${i}`,
        method: 'POST',
        url: '/v1/chat/completions',
        body: { model: 'sim-chat', messages: [{ role: 'user', content: `${i}` }], max_tokens: 2 },
      }),
    );
    const input = await client.files.create({ file: await toFile(Buffer.from([...lines, '{oops'].join('\n')), 'console.jsonl'), purpose: 'batch' });
    const batch = await client.batches.create({ input_file_id: input.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    const done = await waitFor(
      async () => {
        const b = await client.batches.retrieve(batch.id);
        return b.status === 'completed' ? b : null;
      },
      { timeoutMs: 60_000, what: 'the batch to complete' },
    );
    const viewer = await browser.newContext({ viewport: LAPTOP });
    const created = await createApiToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name: 'jobs viewer', role: 'viewer' } });
    const page = await signIn(viewer, created.token);
    await page.goto(url('/console/jobs'));
    expect(await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Jobs' }).getAttribute('aria-current')).toBe('page');
    const row = page.locator(`tr[data-job="${batch.id}"]`);
    expect(await row.getAttribute('data-state')).toBe('completed');
    const text = (await row.textContent()) ?? '';
    expect(text).toContain('13 of 13 rows');
    expect(text).toContain('1 failed');
    expect(text).toContain(done.output_file_id!);
    expect(text).toContain(done.error_file_id!);
    await viewer.close();
  });

  it('reads on a phone: fleet, deployments and tokens', async () => {
    const phone = await browser.newContext({ viewport: PHONE, isMobile: true, hasTouch: true, deviceScaleFactor: 2 });
    const page = await signIn(phone, plane.adminToken);
    // No horizontal scrolling of the page: rows become cards.
    expect(await page.evaluate(() => document.documentElement.scrollWidth <= document.documentElement.clientWidth)).toBe(true);
    await page.screenshot({ path: join(SHOTS, 'fleet-phone.png'), fullPage: true });
    await page.goto(url('/console/deployments'));
    await page.screenshot({ path: join(SHOTS, 'deployments-phone.png'), fullPage: true });
    await page.goto(url('/console/tokens'));
    expect(await page.evaluate(() => document.documentElement.scrollWidth <= document.documentElement.clientWidth)).toBe(true);
    await page.screenshot({ path: join(SHOTS, 'tokens-phone.png'), fullPage: true });
    await phone.close();
  });

  it('is usable from the keyboard: a skip link first, then a visible focus', async () => {
    const page = await admin.newPage();
    await page.goto(url('/'));
    await page.keyboard.press('Tab');
    expect(await page.evaluate(() => document.activeElement?.textContent)).toBe('Skip to content');
    await page.keyboard.press('Enter');
    await page.keyboard.press('Tab');
    const outline = await page.evaluate(() => getComputedStyle(document.activeElement!).outlineStyle);
    expect(outline).not.toBe('none');
    await page.close();
  });

  it('signs out: the session ends, and its cookie no longer opens a page', async () => {
    const page = await admin.newPage();
    await page.goto(url('/'));
    const cookie = (await admin.cookies(plane.url)).find((c) => c.name === 'lnx_session')!;
    await Promise.all([page.waitForURL(/\/console\/sign-in\?ended=out/), page.getByRole('button', { name: 'Sign out' }).click()]);
    expect(await page.getByRole('status').first().textContent()).toContain('You signed out.');
    expect((await admin.cookies(plane.url)).find((c) => c.name === 'lnx_session')).toBeUndefined();
    const replay = await fetch(url('/'), { headers: { cookie: `lnx_session=${cookie.value}` }, redirect: 'manual' });
    expect(replay.status).toBe(303);
    expect(replay.headers.get('location')).toBe('/console/sign-in');
    await page.close();
  });
});
