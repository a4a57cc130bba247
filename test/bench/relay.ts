import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { freePort } from '../../agent/runtimes/process.js';
import { build } from '../../scripts/build.mjs';
import { waitFor } from '../helpers/plane.js';
import { allPages } from '../helpers/pages.js';
import { writeSimPolicy } from '../../functions/dev/fleet.js';
import { createTestDatabase } from '../helpers/pg.js';

/**
 * `npm run bench:relay`: one simulated runtime emitting tokens as fast as it can, measured side by side and
 * interleaved: (a) direct, (b) through nginx (the conventional inbound design), (c) through LunaNexa in one
 * instance, (d) through LunaNexa across two instances via PostgreSQL (client on A, node attached to B).
 * The control plane and the agent run from the production bundles (`npm run build`).
 * Prints a table and writes bench/results/relay.json.
 */
const PG_URL = process.env.LUNANEXA_TEST_PG_URL ?? 'postgres://lunanexa:lunanexa@127.0.0.1:5432/postgres';
const CONCURRENCY = (process.env.BENCH_CONCURRENCY ?? '1,64,256').split(',').map(Number);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const MAX_TOKENS = Number(process.env.BENCH_TOKENS ?? 128);
const REQUESTS = (concurrency: number) => (concurrency === 1 ? 60 : concurrency * 3);
const NGINX = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((p) => existsSync(p));

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const children: ChildProcess[] = [];
const cleanups: Array<() => Promise<void>> = [];

/** BENCH_PROFILE_DIR=dir writes a CPU profile of every process of the relay path there. */
const PROFILE = process.env.BENCH_PROFILE_DIR ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_PROFILE_DIR}`] : [];

/** The production bundles (dist/), as an installation runs them: no TypeScript loader on the hot path. */
let CONTROL_PLANE = '';
let AGENT = '';

function start(args: string[], env: NodeJS.ProcessEnv, logFile: string): ChildProcess {
  const child = spawn(process.execPath, [...PROFILE, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  child.stderr!.on('data', (chunk) => (log += chunk));
  child.once('exit', () => void writeFile(logFile, log).catch(() => {}));
  children.push(child);
  return child;
}

async function controlPlane(name: string, databaseUrl: string, root: string) {
  const port = await freePort();
  const dataDir = join(root, name);
  start([CONTROL_PLANE], { DATABASE_URL: databaseUrl, LUNANEXA_PORT: String(port), LUNANEXA_DATA_DIR: dataDir, LUNANEXA_LOG_LEVEL: 'warn' }, join(root, `${name}.log`));
  const url = `http://127.0.0.1:${port}`;
  await waitFor(async () => (await fetch(`${url}/readyz`)).ok, { timeoutMs: 90_000, what: `${name} ready` });
  const token = (await readFile(join(dataDir, 'admin.token'), 'utf8')).trim();
  return { url, token };
}

interface Sample {
  ttft: number[];
  itl: number[];
  tokens: number;
  errors: number;
  wallMs: number;
}

/** Why requests failed (the first few of each kind), printed after the table: an error count alone says nothing. */
const failures = new Map<string, number>();
function failed(sample: Sample, reason: string): void {
  sample.errors += 1;
  failures.set(reason, (failures.get(reason) ?? 0) + 1);
}

// Idle connections are dropped well before the servers' own 5 s keep-alive timeout: otherwise a path left
// idle while the others run is reused just as its server closes it ("other side closed"), a client race
// that says nothing about the path.
const dispatcher = new Agent({ connections: 2048, keepAliveTimeout: 2_000, keepAliveMaxTimeout: 2_000 });
const BODY = JSON.stringify({ model: 'bench', messages: [{ role: 'user', content: 'measure me' }], max_tokens: MAX_TOKENS, stream: true });
const TOKEN_MARK = '"content":"tok';

async function oneRequest(url: string, token: string | null, sample: Sample): Promise<void> {
  const started = performance.now();
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (token) headers.authorization = `Bearer ${token}`;
  try {
    const response = await request(`${url}/v1/chat/completions`, { method: 'POST', headers, body: BODY, dispatcher });
    if (response.statusCode !== 200) {
      failed(sample, `HTTP ${response.statusCode}: ${(await response.body.text()).slice(0, 200)}`);
      return;
    }
    let last = 0;
    let count = 0;
    let tail = '';
    for await (const chunk of response.body) {
      const now = performance.now();
      const text = tail + (chunk as Buffer).toString('latin1');
      let n = 0;
      for (let at = text.indexOf(TOKEN_MARK); at !== -1; at = text.indexOf(TOKEN_MARK, at + 1)) n += 1;
      tail = text.slice(-TOKEN_MARK.length);
      if (tail.includes('"')) tail = tail.slice(tail.indexOf('"'));
      else tail = '';
      if (n > 0) {
        if (count === 0) sample.ttft.push(now - started);
        else sample.itl.push(now - last);
        for (let i = 1; i < n; i += 1) sample.itl.push(0);
        count += n;
        last = now;
      }
      if (text.includes('"error"')) failed(sample, `error event: ${text.slice(text.indexOf('"error"'), text.indexOf('"error"') + 200)}`);
    }
    if (count !== MAX_TOKENS) failed(sample, `${count} of ${MAX_TOKENS} tokens`);
    sample.tokens += count;
  } catch (error) {
    failed(sample, `request failed: ${error instanceof Error ? error.message : String(error)}`);
  }
}

async function window(url: string, token: string | null, concurrency: number): Promise<Sample> {
  const sample: Sample = { ttft: [], itl: [], tokens: 0, errors: 0, wallMs: 0 };
  let remaining = REQUESTS(concurrency);
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (remaining > 0) {
        remaining -= 1;
        await oneRequest(url, token, sample);
      }
    }),
  );
  sample.wallMs = performance.now() - started;
  return sample;
}

function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

async function main() {
  if (!NGINX) throw new Error('nginx is required: apt-get install -y nginx');
  const outputs = await build({ only: ['control-plane', 'agent'] });
  CONTROL_PLANE = outputs['control-plane']!.path;
  AGENT = outputs.agent!.path;
  const root = await mkdtemp(join(tmpdir(), 'lnx-bench-relay-'));
  cleanups.push(() => rm(root, { recursive: true, force: true }));
  const db = await createTestDatabase(PG_URL);
  cleanups.push(() => db.drop());

  const b = await controlPlane('instance-b', db.url, root);
  const a = await controlPlane('instance-a', db.url, root);
  const api = (path: string, init: RequestInit = {}) =>
    fetch(`${b.url}${path}`, { ...init, headers: { authorization: `Bearer ${b.token}`, 'content-type': 'application/json' } });
  const put = await api('/api/v1/deployments/bench', {
    method: 'PUT',
    body: JSON.stringify({
      model: 'bench',
      runtime: { kind: 'simulated', model: 'bench', ttftMs: 0, tokensPerSecond: 0, loadMs: 0 },
      replicas: 1,
      selector: { bench: 'true' },
      maxConcurrency: 1024,
      queueCapacity: 8192,
    }),
  });
  if (!put.ok) throw new Error(`deployment: ${put.status} ${await put.text()}`);
  const enrollment = (await (await api('/api/v1/enrollment-tokens', { method: 'POST', body: JSON.stringify({ name: 'bench-node', labels: { bench: 'true' } }) })).json()) as { token: string };
  const stateDir = join(root, 'node');
  const enroll = start([AGENT, 'enroll', '--url', b.url, '--token', '-', '--name', 'bench-node', '--state-dir', stateDir], { LUNANEXA_ENROLLMENT_TOKEN: enrollment.token }, join(root, 'enroll.log'));
  await new Promise((r) => enroll.once('exit', r));
  start([AGENT, 'run', '--state-dir', stateDir, '--policy', await writeSimPolicy(stateDir), '--stop-runtimes-on-exit'], {}, join(root, 'agent.log'));
  await waitFor(async () => {
    const machines = await allPages<{ runtimes: Array<{ deploymentName: string; routable: boolean }> }>(api, '/api/v1/machines');
    return machines.some((m) => m.runtimes.some((r) => r.deploymentName === 'bench' && r.routable));
  }, { timeoutMs: 90_000, what: 'bench runtime routable' });
  // Both instances route from their own snapshot; wait until A sees the replica too.
  await waitFor(async () => {
    const r = await fetch(`${a.url}/v1/chat/completions`, { method: 'POST', headers: { authorization: `Bearer ${a.token}`, 'content-type': 'application/json' }, body: BODY });
    await r.text();
    return r.ok;
  }, { timeoutMs: 90_000, what: 'instance A routes bench' });
  const record = JSON.parse(await readFile(join(stateDir, 'runtimes', (await readdir(join(stateDir, 'runtimes'))).find((f) => f.endsWith('.json'))!), 'utf8')) as { port: number };
  const direct = `http://127.0.0.1:${record.port}`;

  const nginxPort = await freePort();
  const prefix = join(root, 'nginx');
  await mkdir(join(prefix, 'logs'), { recursive: true });
  await writeFile(
    join(prefix, 'nginx.conf'),
    `daemon off;
worker_processes 1;
pid ${prefix}/nginx.pid;
error_log ${prefix}/logs/error.log warn;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path ${prefix}/body; proxy_temp_path ${prefix}/proxy; fastcgi_temp_path ${prefix}/fcgi;
  uwsgi_temp_path ${prefix}/uwsgi; scgi_temp_path ${prefix}/scgi;
  upstream runtime { server 127.0.0.1:${record.port}; keepalive 1024; }
  server {
    listen 127.0.0.1:${nginxPort};
    location / {
      proxy_pass http://runtime;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
    }
  }
}
`,
  );
  const nginx = spawn(NGINX, ['-p', prefix, '-c', join(prefix, 'nginx.conf')], { stdio: 'ignore' });
  children.push(nginx);
  await waitFor(async () => (await fetch(`http://127.0.0.1:${nginxPort}/health`)).ok, { what: 'nginx' });

  const all = [
    { key: 'direct', label: '(a) direct', url: direct, token: null },
    { key: 'nginx', label: '(b) nginx reverse proxy', url: `http://127.0.0.1:${nginxPort}`, token: null },
    { key: 'lunanexa', label: '(c) LunaNexa, one instance', url: b.url, token: b.token },
    { key: 'lunanexa-2', label: '(d) LunaNexa, two instances via PostgreSQL', url: a.url, token: a.token },
  ];
  // BENCH_TARGETS=lunanexa (comma-separated keys) measures a subset, e.g. while profiling one path.
  const only = process.env.BENCH_TARGETS?.split(',');
  const targets = only ? all.filter((t) => only.includes(t.key)) : all;
  // Warm every path (JIT, connection pools) before measuring.
  for (const target of targets) await window(target.url, target.token, 8);

  const results: Record<string, Record<number, Sample>> = {};
  for (const concurrency of CONCURRENCY) {
    for (let round = 0; round < ROUNDS; round += 1) {
      // Interleave, rotating the order so no path always runs first or last.
      const order = targets.map((_, i) => targets[(i + round) % targets.length]!);
      for (const target of order) {
        const sample = await window(target.url, target.token, concurrency);
        const total = ((results[target.key] ??= {})[concurrency] ??= { ttft: [], itl: [], tokens: 0, errors: 0, wallMs: 0 });
        total.ttft.push(...sample.ttft);
        total.itl.push(...sample.itl);
        total.tokens += sample.tokens;
        total.errors += sample.errors;
        total.wallMs += sample.wallMs;
        process.stderr.write(`c=${concurrency} round ${round + 1} ${target.key}: ${Math.round(sample.tokens / (sample.wallMs / 1000))} tok/s, errors ${sample.errors}\n`);
      }
    }
  }

  const rows: Array<{ path: string; concurrency: number; requests: number; ttftP50Ms: number; ttftP99Ms: number; itlP50Ms: number; itlP99Ms: number; tokensPerSecond: number; errors: number }> = [];
  for (const concurrency of CONCURRENCY) {
    for (const target of targets) {
      const s = results[target.key]![concurrency]!;
      rows.push({
        path: target.key,
        concurrency,
        requests: s.ttft.length,
        ttftP50Ms: percentile(s.ttft, 50),
        ttftP99Ms: percentile(s.ttft, 99),
        itlP50Ms: percentile(s.itl, 50),
        itlP99Ms: percentile(s.itl, 99),
        tokensPerSecond: s.tokens / (s.wallMs / 1000),
        errors: s.errors,
      });
    }
  }
  for (const [reason, count] of failures) console.log(`failure x${count}: ${reason}`);
  if (only) {
    for (const r of rows) console.log(JSON.stringify(r));
    return;
  }
  const row = (path: string, c: number) => rows.find((r) => r.path === path && r.concurrency === c)!;
  const c1 = CONCURRENCY.includes(1) ? 1 : CONCURRENCY[0]!;
  const c64 = CONCURRENCY.includes(64) ? 64 : CONCURRENCY[0]!;
  const ratios = {
    addedTtftP50MsVsDirect: row('lunanexa', c1).ttftP50Ms - row('direct', c1).ttftP50Ms,
    addedTtftP99MsVsDirect: row('lunanexa', c1).ttftP99Ms - row('direct', c1).ttftP99Ms,
    addedTtftP50MsVsNginx: row('lunanexa', c1).ttftP50Ms - row('nginx', c1).ttftP50Ms,
    addedTtftP50MsCrossInstanceVsDirect: row('lunanexa-2', c1).ttftP50Ms - row('direct', c1).ttftP50Ms,
    tokensPerSecondVsDirectAt64: row('lunanexa', c64).tokensPerSecond / row('direct', c64).tokensPerSecond,
    tokensPerSecondVsNginxAt64: row('lunanexa', c64).tokensPerSecond / row('nginx', c64).tokensPerSecond,
    tokensPerSecondCrossInstanceVsDirectAt64: row('lunanexa-2', c64).tokensPerSecond / row('direct', c64).tokensPerSecond,
    errorsAt256: CONCURRENCY.includes(256) ? targets.map((t) => row(t.key, 256).errors).reduce((x, y) => x + y, 0) : null,
  };
  const fmt = (n: number) => (Number.isFinite(n) ? n.toFixed(n < 10 ? 3 : 0) : 'n/a');
  console.log(`\nrelay benchmark: ${MAX_TOKENS} tokens per request, ${ROUNDS} interleaved rounds, simulated runtime at full speed\n`);
  console.log('| path | concurrency | requests | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | tokens/s | errors |');
  console.log('|---|---|---|---|---|---|---|---|---|');
  for (const r of rows) {
    console.log(`| ${r.path} | ${r.concurrency} | ${r.requests} | ${fmt(r.ttftP50Ms)} | ${fmt(r.ttftP99Ms)} | ${fmt(r.itlP50Ms)} | ${fmt(r.itlP99Ms)} | ${fmt(r.tokensPerSecond)} | ${r.errors} |`);
  }
  console.log('\n| ratio | value | target |');
  console.log('|---|---|---|');
  console.log(`| added TTFT p50 vs direct (c=${c1}) | ${fmt(ratios.addedTtftP50MsVsDirect)} ms | <= 1 ms |`);
  console.log(`| added TTFT p99 vs direct (c=${c1}) | ${fmt(ratios.addedTtftP99MsVsDirect)} ms | <= 3 ms |`);
  console.log(`| added TTFT p50 vs nginx (c=${c1}) | ${fmt(ratios.addedTtftP50MsVsNginx)} ms | |`);
  console.log(`| added TTFT p50 cross-instance vs direct (c=${c1}) | ${fmt(ratios.addedTtftP50MsCrossInstanceVsDirect)} ms | |`);
  console.log(`| tokens/s vs direct (c=${c64}) | ${(ratios.tokensPerSecondVsDirectAt64 * 100).toFixed(1)} % | >= 95 % |`);
  console.log(`| tokens/s vs nginx (c=${c64}) | ${(ratios.tokensPerSecondVsNginxAt64 * 100).toFixed(1)} % | |`);
  console.log(`| tokens/s cross-instance vs direct (c=${c64}) | ${(ratios.tokensPerSecondCrossInstanceVsDirectAt64 * 100).toFixed(1)} % | |`);
  console.log(`| errors at c=256 (all paths) | ${ratios.errorsAt256} | 0 |`);
  await mkdir('bench/results', { recursive: true });
  await writeFile(
    'bench/results/relay.json',
    `${JSON.stringify({ measuredAt: new Date().toISOString(), command: 'npm run bench:relay', maxTokens: MAX_TOKENS, rounds: ROUNDS, rows, ratios }, null, 2)}\n`,
  );
}

try {
  await main();
} finally {
  for (const child of children.reverse()) child.kill('SIGTERM');
  await sleep(3_000);
  for (const child of children) if (child.exitCode === null) child.kill('SIGKILL');
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
  await dispatcher.close();
}
