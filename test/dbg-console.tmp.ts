import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { seedDemoDeployment, startSimNode, stopSimNodes } from '../functions/dev/fleet.js';
import { createEnrollmentToken } from '../functions/services/enrollment.js';
import { enrollAgent } from '../agent/agent.js';
import { startTestPlane, STEADY_LIVENESS, waitFor } from './helpers/plane.js';
const plane = await startTestPlane({ store: 'pg', config: STEADY_LIVENESS });
await seedDemoDeployment(plane, 1, { loadMs: 100 });
const nodesDir = join(plane.dataDir, 'nodes');
const { token } = await createEnrollmentToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name: 'dgx-1', labels: { sim: 'true' }, ttlSeconds: 300 } });
await enrollAgent({ url: plane.url, token, name: 'dgx-1', stateDir: join(nodesDir, 'dgx-1'), log: () => {} });
const nodes = [await startSimNode(plane, 'dgx-1', nodesDir)];
const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox'] });
try {
  await waitFor(async () => ((await (await plane.admin('/api/v1/machines')).json()) as any).data[0]?.state === 'ready', { timeoutMs: 60000 });
  const page = await browser.newPage();
  page.on('console', (m) => console.log('console:', m.text()));
  page.on('dialog', (d) => { console.log('dialog', d.message()); void d.accept(); });
  page.on('request', (r) => r.method() === 'POST' && console.log('POST', r.url()));
  page.on('response', (r) => r.request().method() === 'POST' && console.log('resp', r.status(), r.url()));
  await page.goto(`${plane.url}/`);
  await page.getByLabel('API token').fill(plane.adminToken);
  await Promise.all([page.waitForURL(`${plane.url}/`), page.getByRole('button', { name: 'Sign in' }).click()]);
  await page.locator('#live-status', { hasText: 'Live updates on.' }).waitFor();
  const id = ((await (await plane.admin('/api/v1/machines')).json()) as any).data[0].id;
  await page.locator(`#drain-${id}`).click();
  await page.waitForTimeout(3000);
  console.log(page.url());
} finally { await browser.close(); await stopSimNodes(nodes); await plane.stop(); }
