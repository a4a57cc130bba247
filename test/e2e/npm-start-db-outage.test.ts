import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort } from '../../agent/runtimes/process.js';
import { waitForExit } from '../../functions/hosts/dev/fleet.js';
import { LISTENER_NAME } from '../../functions/store/pg-bus.js';
import { DeploymentSpec } from '../../shared/contracts/deployment.js';
import type { MachineView } from '../../shared/contracts/machine.js';
import { waitFor } from '../helpers/plane.js';
import { privateClusterUnavailable, startPrivateCluster, type PrivateCluster } from '../helpers/private-pg.js';

const unavailable = privateClusterUnavailable();

/** Sessions of the cluster that listen for the bus, as the server sees them. */
async function listeners(url: string): Promise<number> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ n: number }>(
      `select count(*)::int as n from pg_stat_activity where pid <> pg_backend_pid() and (query ilike 'listen%' or application_name = $1)`,
      [LISTENER_NAME],
    );
    return rows[0]!.n;
  } finally {
    await client.end();
  }
}

/**
 * `npm start` with DATABASE_URL through a database outage (issue 11): a private PostgreSQL cluster, since
 * only one of our own may be stopped, is stopped for about 5 s and started again. The control plane must
 * stay up, say it is not ready while the store is away, and heal by itself: ready again, the four simulated
 * nodes serving, and its bus listening again so that a deployment change made afterwards reaches the nodes.
 * Every wait is a deadline to poll against, generous for a loaded two-core machine.
 */
describe('npm start with DATABASE_URL through a database outage', () => {
  let dataDir: string | undefined;
  let cluster: PrivateCluster | undefined;
  afterAll(async () => {
    await cluster?.destroy();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  it.skipIf(unavailable !== null)(
    `stays up, reports not ready during the outage, and heals after it${unavailable ? ` (skipped: ${unavailable})` : ''}`,
    async () => {
      cluster = await startPrivateCluster();
      dataDir = await mkdtemp(join(tmpdir(), 'lnx-outage-'));
      const port = await freePort();
      const base = `http://127.0.0.1:${port}`;
      const child = spawn('npm', ['start'], {
        cwd: process.cwd(),
        env: { ...process.env, DATABASE_URL: cluster.url, LUNANEXA_DATA_DIR: dataDir, LUNANEXA_PORT: String(port), LUNANEXA_LOG_LEVEL: 'warn' },
        stdio: ['ignore', 'pipe', 'pipe'],
        detached: true,
      });
      let output = '';
      child.stdout!.on('data', (chunk) => (output += chunk));
      child.stderr!.on('data', (chunk) => (output += chunk));
      const alive = () => child.exitCode === null && child.signalCode === null;

      try {
        const token = await waitFor(async () => (await readFile(join(dataDir!, 'admin.token'), 'utf8')).trim(), { timeoutMs: 60_000, what: 'admin.token' });
        const headers = { authorization: `Bearer ${token}`, 'content-type': 'application/json' };
        const infer = () =>
          fetch(`${base}/v1/chat/completions`, {
            method: 'POST',
            headers,
            body: JSON.stringify({ model: 'sim-chat', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }),
          });
        const machines = async () => ((await (await fetch(`${base}/api/v1/machines`, { headers })).json()) as { data: MachineView[] }).data;
        const fourServing = async () => {
          const list = await machines();
          return list.length === 4 && list.every((m) => m.state === 'ready' && m.runtimes.some((r) => r.routable)) ? list : null;
        };
        const readyz = async () => {
          const response = await fetch(`${base}/readyz`);
          return { status: response.status, body: (await response.json()) as { status: string; reachable: boolean } };
        };
        const busReconnects = async () => Number(/^lunanexa_bus_reconnects_total (\d+)/m.exec(await (await fetch(`${base}/metrics`)).text())?.[1] ?? 0);

        await waitFor(async () => /simulated nodes ready/.test(output), { timeoutMs: 120_000, intervalMs: 100, what: 'the ready line' });
        expect((await infer()).status).toBe(200);
        expect(await busReconnects()).toBe(0);

        // The outage.
        const stoppedAt = Date.now();
        await cluster.stop();
        const during = await waitFor(
          async () => {
            const r = await readyz();
            return r.status === 503 ? r : null;
          },
          { timeoutMs: 30_000, intervalMs: 200, what: '/readyz to say not ready while the store is away' },
        );
        expect(during.body).toMatchObject({ status: 'store_unreachable', reachable: false });
        await new Promise((resolve) => setTimeout(resolve, Math.max(0, 5_000 - (Date.now() - stoppedAt))));
        expect(alive(), 'the control plane exited during the outage').toBe(true);
        expect((await readyz()).status).toBe(503);
        await cluster.start();

        // After it: nothing restarted, everything back.
        await waitFor(async () => (await readyz()).status === 200, { timeoutMs: 60_000, intervalMs: 250, what: '/readyz to say ready once the store is back' });
        await waitFor(fourServing, { timeoutMs: 90_000, intervalMs: 500, what: 'four serving simulated nodes after the outage' });
        await waitFor(async () => (await infer()).status === 200, { timeoutMs: 60_000, intervalMs: 500, what: 'an inference answer after the outage' });
        await waitFor(async () => (await busReconnects()) >= 1, { timeoutMs: 60_000, intervalMs: 500, what: 'the bus listening again' });
        expect(await listeners(cluster.url)).toBeGreaterThanOrEqual(1);

        // A change made after the outage travels over the healed bus: one replica fewer, and every node holds the new state.
        const before = await machines();
        const genBefore = before.reduce((sum, m) => sum + m.desiredGen, 0);
        const spec = DeploymentSpec.parse(await (await fetch(`${base}/api/v1/deployments/sim-chat`, { headers })).json());
        const applied = await fetch(`${base}/api/v1/deployments/sim-chat`, { method: 'PUT', headers, body: JSON.stringify({ ...spec, replicas: 3 }) });
        expect(applied.status, await applied.clone().text()).toBe(200);
        await waitFor(
          async () => {
            const list = await machines();
            const gen = list.reduce((sum, m) => sum + m.desiredGen, 0);
            const placed = list.filter((m) => m.runtimes.some((r) => r.desired)).length;
            return gen > genBefore && placed === 3 && list.every((m) => m.reportedGen === m.desiredGen);
          },
          { timeoutMs: 60_000, intervalMs: 500, what: 'the nodes to hold the changed deployment' },
        );
        expect((await infer()).status).toBe(200);
        expect(alive()).toBe(true);
      } catch (error) {
        throw new Error(`${error instanceof Error ? error.message : String(error)}\n--- npm start output (tail) ---\n${output.slice(-4_000)}`);
      } finally {
        if (alive()) process.kill(-child.pid!, 'SIGINT');
        await waitForExit(child, 30_000);
      }
      await waitFor(async () => output.includes('stopped cleanly'), { timeoutMs: 30_000, what: 'orderly stop' });
    },
    360_000,
  );
});
