import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../agent/runtimes/process.js';
import { cachedStoreTemplate } from '../../functions/store/pglite-template.js';
import type { MachineView } from '../../shared/contracts/machine.js';
import { allPages } from '../helpers/pages.js';

/**
 * Measures, with the protocol's default timings, (1) the time from `npm start` on a fresh data dir to the first
 * successful chat completion and to four routable simulated nodes, and (2) the time from SIGKILL of one agent to that node showing `stale` and `down`
 * in GET /api/v1/machines. Prints a table and writes bench/results/fleet-liveness.json.
 */
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function pidOfAgent(stateDir: string): Promise<number> {
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const cmdline = await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '');
    const args = cmdline.split('\0');
    if (args.includes('run') && args.includes(stateDir)) return Number(entry);
  }
  throw new Error(`no agent process for ${stateDir}`);
}

/** Whether the new store starts from the cached template (docs/operations.md, "The embedded store"), or makes it. */
const templateCached = (await cachedStoreTemplate()) !== null;

/** One chat completion of the demo model: true once it is answered with 200. */
async function chatOnce(token: string): Promise<boolean> {
  const response = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-chat', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }),
  }).catch(() => null);
  await response?.arrayBuffer();
  return response?.status === 200;
}

const dataDir = await mkdtemp(join(tmpdir(), 'lnx-bench-'));
const port = await freePort();
const started = performance.now();
const child = spawn('npm', ['start'], {
  env: { ...process.env, LUNANEXA_DATA_DIR: dataDir, LUNANEXA_PORT: String(port), LUNANEXA_LOG_LEVEL: 'warn' },
  stdio: 'ignore',
  detached: true,
});
const since = (t: number) => (performance.now() - t) / 1000;

async function machines(token: string): Promise<MachineView[]> {
  return await allPages<MachineView>((path) => fetch(`http://127.0.0.1:${port}${path}`, { headers: { authorization: `Bearer ${token}` } }), '/api/v1/machines');
}

try {
  let token = '';
  while (!token) {
    token = (await readFile(join(dataDir, 'admin.token'), 'utf8').catch(() => '')).trim();
    await sleep(100);
  }
  let readyAfter = 0;
  let firstChatAfter = 0;
  for (;;) {
    if (!firstChatAfter && (await chatOnce(token))) firstChatAfter = since(started);
    const list = await machines(token).catch(() => []);
    if (list.length === 4 && list.every((m) => m.state === 'ready' && m.runtimes[0]?.routable)) {
      readyAfter = since(started);
      break;
    }
    if (since(started) > 120) throw new Error('four nodes not ready within 120 s');
    await sleep(50);
  }
  while (!firstChatAfter) if (await chatOnce(token)) firstChatAfter = since(started);
  const loadAfterStart = (await readFile('/proc/loadavg', 'utf8')).split(' ').slice(0, 3).join(' ');
  const victim = join(dataDir, 'nodes', 'dgx-4');
  const pid = await pidOfAgent(victim);
  const killed = performance.now();
  process.kill(pid, 'SIGKILL');
  let staleAfter = 0;
  let downAfter = 0;
  let othersReady = true;
  while (!downAfter) {
    const list = await machines(token);
    const node = list.find((m) => m.name === 'dgx-4')!;
    othersReady &&= list.filter((m) => m.name !== 'dgx-4').every((m) => m.state === 'ready');
    if (!staleAfter && node.state === 'stale') staleAfter = since(killed);
    if (node.state === 'down') downAfter = since(killed);
    if (since(killed) > 120) throw new Error('node not down within 120 s');
    await sleep(100);
  }
  const results = {
    measuredAt: new Date().toISOString(),
    command: 'npm run bench:fleet',
    config: { heartbeatIntervalMs: 20_000, staleAfterMs: 35_000, machineLifetimeMs: 60_000 },
    storeTemplateCached: templateCached,
    loadAverageAfterStart: loadAfterStart,
    npmStartToFirstChatS: Number(firstChatAfter.toFixed(2)),
    npmStartToFourRoutableNodesS: Number(readyAfter.toFixed(2)),
    killToStaleS: Number(staleAfter.toFixed(2)),
    killToDownS: Number(downAfter.toFixed(2)),
    otherNodesStayedReady: othersReady,
  };
  console.log('\n| measurement | seconds | rule |');
  console.log('|---|---|---|');
  console.log(
    `| npm start -> first chat completion | ${results.npmStartToFirstChatS} | within 10 s (store template ${templateCached ? 'cached' : 'not cached yet'}; load ${loadAfterStart}) |`,
  );
  console.log(`| npm start -> 4 routable nodes | ${results.npmStartToFourRoutableNodesS} | within 30 s |`);
  console.log(`| SIGKILL agent -> stale | ${results.killToStaleS} | last heartbeat + 35 s (20 s keep-alive + 15 s grace) |`);
  console.log(`| SIGKILL agent -> down | ${results.killToDownS} | last heartbeat + 60 s |`);
  console.log(`| other nodes stayed ready | ${othersReady} | |`);
  await mkdir('bench/results', { recursive: true });
  await writeFile('bench/results/fleet-liveness.json', `${JSON.stringify(results, null, 2)}\n`);
} finally {
  process.kill(-child.pid!, 'SIGINT');
  await sleep(5_000);
  await rm(dataDir, { recursive: true, force: true });
}
