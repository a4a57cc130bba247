import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Miniflare } from 'miniflare';
import { writeSimPolicy } from '../../functions/hosts/dev/fleet.js';
import { createTestDatabase } from '../helpers/pg.js';
import { startEdgeFixture, workerOptions, type EdgeFixture } from '../helpers/edge.js';
import { waitFor } from '../helpers/plane.js';
import { cpuSince, loadAverage, pidsByCommandLine, snapshot, type Tracked } from './proc-cpu.js';
import { currentBundles, startLunaNexa, type Bundles } from './relay-lunanexa.js';
import { addSample, emptySample, failures, percentile, window, type Sample, type Target } from './relay-load.js';
import { exited, spawnLogged, stopSpawned } from './spawned.js';

/**
 * `npm run bench:edge`: what the Workers edge adds (docs/workers.md). The same simulated runtime served three ways
 * in interleaved rounds: direct, through the Node control plane (the agent's stream held by the process the client
 * reaches), and through the built Worker in workerd (Miniflare), where every invocation goes from the client's
 * request to the machine's Durable Object and back. TTFT p50/p99 at c=1 and c=8, CPU per request from /proc and
 * the load average beside each figure. Then the PostgreSQL connections the Worker opens per request type, counted
 * at the Neon WebSocket proxy stand-in (every connection a Worker opens goes through it). Prints markdown tables
 * and writes bench/results/edge.json.
 */
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const MODEL = 'bench-edge';
const MAX_TOKENS = 16;
const CONCURRENCY = [1, 8];
/** Requests per path per round at concurrency c. */
const requestsAt = (c: number) => Number(process.env.BENCH_REQUESTS ?? 0) || (c === 1 ? 40 : 160);
/** Sequential requests per type when counting connections. */
const CONNECTION_SAMPLES = 10;

const deploymentSpec = {
  model: MODEL,
  runtime: { kind: 'simulated', model: MODEL, ttftMs: 0, tokensPerSecond: 2_000, loadMs: 0 },
  replicas: 1,
  selector: { bench: 'true' },
  maxConcurrency: 1024,
  queueCapacity: 8192,
};

interface Edge {
  target: Target;
  fixture: EdgeFixture;
  mf: Miniflare;
  processes: Tracked[];
  api(path: string, init?: RequestInit): Promise<Response>;
}

/** The built Worker in one workerd, on its own database behind the proxy stand-in, with an agent dialled into it. */
async function startEdge(bundles: Bundles, logs: string, state: string): Promise<Edge> {
  const fixture = await startEdgeFixture();
  const mf = new Miniflare({ ...workerOptions(fixture, 'edge-bench', fixture.bindings()), host: '127.0.0.1', port: 0 });
  const url = (await mf.ready).toString().replace(/\/$/, '');
  const api = (path: string, init: RequestInit = {}) =>
    fetch(`${url}${path}`, { ...init, headers: { authorization: `Bearer ${fixture.adminToken}`, 'content-type': 'application/json' } });
  const put = await api(`/api/v1/deployments/${MODEL}`, { method: 'PUT', body: JSON.stringify(deploymentSpec) });
  if (!put.ok) throw new Error(`edge deployment: ${put.status} ${await put.text()}`);
  const enrollment = (await (
    await api('/api/v1/enrollment-tokens', { method: 'POST', body: JSON.stringify({ name: 'edge-node', labels: { bench: 'true' } }) })
  ).json()) as { token: string };
  const stateDir = join(state, 'edge-node');
  await mkdir(stateDir, { recursive: true, mode: 0o700 });
  const enroll = spawnLogged(
    process.execPath,
    [bundles.agent, 'enroll', '--url', url, '--token', '-', '--name', 'edge-node', '--state-dir', stateDir],
    { LUNANEXA_ENROLLMENT_TOKEN: enrollment.token },
    join(logs, 'edge-enroll.log'),
  );
  await exited(enroll);
  const agent = spawnLogged(
    process.execPath,
    [bundles.agent, 'run', '--state-dir', stateDir, '--policy', await writeSimPolicy(stateDir), '--stop-runtimes-on-exit'],
    {},
    join(logs, 'edge-agent.log'),
  );
  const target: Target = { url, token: fixture.adminToken, model: MODEL, maxTokens: MAX_TOKENS };
  // Placement runs on the cron trigger: tick until the replica answers.
  const worker = (await mf.getWorker()) as unknown as { scheduled(opts: { cron: string }): Promise<unknown> };
  await waitFor(
    async () => {
      await worker.scheduled({ cron: '*/1 * * * *' });
      const response = await api('/v1/chat/completions', {
        method: 'POST',
        body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'ready?' }], max_tokens: 1 }),
      });
      await response.text();
      return response.ok;
    },
    { timeoutMs: 120_000, intervalMs: 1_000, what: 'the edge to route the bench deployment' },
  );
  const dbName = new URL(fixture.database.url).pathname.slice(1);
  const processes: Tracked[] = [
    // Miniflare's workerd: the Worker's isolates and the machine's object run in it.
    { name: 'workerd', pids: () => pidsByCommandLine((line) => /\/workerd\s/.test(line) && line.includes(' serve ')) },
    { name: 'agent (edge)', pids: () => [agent.pid!] },
    { name: 'postgres (edge)', pids: () => pidsByCommandLine((line) => line.startsWith('postgres: ') && line.includes(` ${dbName} `)) },
  ];
  return { target, fixture, mf, processes, api };
}

interface LatencyRow {
  path: string;
  concurrency: number;
  requests: number;
  errors: number;
  ttftP50Ms: number;
  ttftP99Ms: number;
  /** CPU of the path's own processes (control plane or workerd, and the agent) per request. */
  pathCpuMsPerRequest: number | null;
  postgresCpuMsPerRequest: number | null;
  loadAverage: number;
}

const round1 = (v: number) => Math.round(v * 10) / 10;
const round2 = (v: number) => Math.round(v * 100) / 100;

async function latency(
  targets: Record<string, Target>,
  cpu: Record<string, { path: string[]; postgres: string | null }>,
  tracked: Tracked[],
): Promise<LatencyRow[]> {
  const rows: LatencyRow[] = [];
  for (const c of CONCURRENCY) {
    const totals = new Map<string, { sample: Sample; cpu: Record<string, number> }>();
    const loads: number[] = [];
    for (let round = 0; round < ROUNDS; round += 1) {
      // A different order each round, so that no path always runs first (or right after another).
      const order = Object.keys(targets);
      for (let i = 0; i < round % order.length; i += 1) order.push(order.shift()!);
      for (const path of order) {
        const before = snapshot(tracked);
        const sample = await window(path, targets[path]!, c, requestsAt(c));
        const used = cpuSince(before, tracked);
        loads.push(loadAverage());
        const total = totals.get(path) ?? { sample: emptySample(), cpu: {} };
        addSample(total.sample, sample);
        for (const [name, ms] of Object.entries(used)) total.cpu[name] = (total.cpu[name] ?? 0) + ms;
        totals.set(path, total);
      }
    }
    for (const [path, { sample, cpu: used }] of totals) {
      const groups = cpu[path]!;
      const perRequest = (names: string[]) => (names.length === 0 ? null : round2(names.reduce((sum, n) => sum + (used[n] ?? 0), 0) / sample.requests));
      rows.push({
        path,
        concurrency: c,
        requests: sample.requests,
        errors: sample.errors,
        ttftP50Ms: round2(percentile(sample.ttft, 50)),
        ttftP99Ms: round2(percentile(sample.ttft, 99)),
        pathCpuMsPerRequest: perRequest(groups.path),
        postgresCpuMsPerRequest: groups.postgres ? perRequest([groups.postgres]) : null,
        loadAverage: round2(loads.reduce((a, b) => a + b, 0) / loads.length),
      });
    }
  }
  return rows;
}

interface ConnectionRow {
  request: string;
  samples: number;
  /** Connections opened through the proxy per request, with the idle background taken out. */
  perRequest: number;
  /** Statements sent over the SQL-over-HTTP endpoint per request (batched records), idle background taken out. */
  httpStatementsPerRequest: number;
  /** The most open at once while the requests ran (the machine's object keeps one of its own). */
  peakOpen: number;
}

/** Connections the Worker opens per request type, each type sent CONNECTION_SAMPLES times one after another. */
async function connections(edge: Edge): Promise<{ rows: ConnectionRow[]; idlePerMinute: number }> {
  const { proxy } = edge.fixture;
  const chat = (stream: boolean) => () =>
    edge.api('/v1/chat/completions', {
      method: 'POST',
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'count' }], max_tokens: MAX_TOKENS, stream }),
    });
  const spec = JSON.stringify(deploymentSpec);
  const types: Array<[string, () => Promise<Response>]> = [
    ['POST /v1/chat/completions (stream)', chat(true)],
    ['POST /v1/chat/completions', chat(false)],
    ['GET /v1/models', () => edge.api('/v1/models')],
    ['GET /api/v1/machines', () => edge.api('/api/v1/machines')],
    [`GET /api/v1/deployments/${MODEL}`, () => edge.api(`/api/v1/deployments/${MODEL}`)],
    [`PUT /api/v1/deployments/${MODEL} (unchanged)`, () => edge.api(`/api/v1/deployments/${MODEL}`, { method: 'PUT', body: spec })],
  ];
  // The agent's stream, uplink and heartbeats run all along: their rate while idle is taken out of each count.
  const idleMs = 20_000;
  const idleStart = proxy.acceptedConnections();
  const idleStatements = proxy.sqlRequests();
  await new Promise((r) => setTimeout(r, idleMs));
  const idlePerMs = (proxy.acceptedConnections() - idleStart) / idleMs;
  const idleStatementsPerMs = (proxy.sqlRequests() - idleStatements) / idleMs;
  const rows: ConnectionRow[] = [];
  for (const [request, send] of types) {
    const started = performance.now();
    const before = proxy.acceptedConnections();
    const statementsBefore = proxy.sqlRequests();
    let peakOpen = 0;
    for (let i = 0; i < CONNECTION_SAMPLES; i += 1) {
      const response = await send();
      if (!response.ok) throw new Error(`${request}: HTTP ${response.status} ${await response.text()}`);
      await response.text();
      peakOpen = Math.max(peakOpen, proxy.openConnections());
    }
    const elapsed = performance.now() - started;
    const perRequest = (delta: number, idleRate: number) => round2(Math.max(0, delta - idleRate * elapsed) / CONNECTION_SAMPLES);
    rows.push({
      request,
      samples: CONNECTION_SAMPLES,
      perRequest: perRequest(proxy.acceptedConnections() - before, idlePerMs),
      httpStatementsPerRequest: perRequest(proxy.sqlRequests() - statementsBefore, idleStatementsPerMs),
      peakOpen,
    });
  }
  return { rows, idlePerMinute: round1(idlePerMs * 60_000) };
}

function latencyTable(rows: LatencyRow[]): string[] {
  const node = (c: number) => rows.find((r) => r.path === 'node' && r.concurrency === c);
  return [
    '| path | c | requests | errors | TTFT p50 ms | TTFT p99 ms | p50 added vs node | path CPU ms/req | postgres CPU ms/req | load avg |',
    '|---|---|---|---|---|---|---|---|---|---|',
    ...rows.map((r) => {
      const added = r.path === 'edge' && node(r.concurrency) ? `+${round2(r.ttftP50Ms - node(r.concurrency)!.ttftP50Ms)}` : '';
      return `| ${r.path} | ${r.concurrency} | ${r.requests} | ${r.errors} | ${r.ttftP50Ms} | ${r.ttftP99Ms} | ${added} | ${r.pathCpuMsPerRequest ?? '-'} | ${r.postgresCpuMsPerRequest ?? '-'} | ${r.loadAverage} |`;
    }),
  ];
}

async function main(): Promise<void> {
  const work = await mkdtemp(join(tmpdir(), 'lnx-bench-edge-'));
  const logs = join(work, 'logs');
  await mkdir(logs, { recursive: true });
  const nodeDb = await createTestDatabase();
  let edge: Edge | undefined;
  try {
    const bundles = await currentBundles();
    const node = await startLunaNexa({
      bundles,
      databaseUrl: nodeDb.url,
      logs,
      state: join(work, 'node'),
      twoInstances: false,
      deployments: [{ model: MODEL, tokensPerSecond: 2_000 }],
    });
    edge = await startEdge(bundles, logs, join(work, 'edge'));
    const targets: Record<string, Target> = {
      direct: { url: `http://127.0.0.1:${node.runtimePorts.get(MODEL)}`, token: null, model: MODEL, maxTokens: MAX_TOKENS },
      node: { url: node.b.url, token: node.b.token, model: MODEL, maxTokens: MAX_TOKENS },
      edge: edge.target,
    };
    const [plane, agent, , postgres] = node.processes.map((p) => p.name);
    const cpu = {
      direct: { path: [], postgres: null },
      node: { path: [plane!, agent!], postgres: postgres! },
      edge: { path: ['workerd', 'agent (edge)'], postgres: 'postgres (edge)' },
    };
    // Warm both planes (JIT, the object's first instantiation, connection setup) before measuring.
    for (const path of ['node', 'edge']) await window(path, targets[path]!, 8, 200);
    failures.clear();
    const rows = await latency(targets, cpu, [...node.processes, ...edge.processes]);
    const conns = await connections(edge);
    const lines = [
      `## Workers edge: the object hop (${ROUNDS} interleaved rounds, ${MAX_TOKENS} tokens per streamed completion)`,
      '',
      ...latencyTable(rows),
      '',
      `## Workers edge: PostgreSQL connections per request (Neon proxy stand-in; idle background ${conns.idlePerMinute}/min taken out)`,
      '',
      '| request | samples | connections per request | SQL-over-HTTP statements per request | peak open |',
      '|---|---|---|---|---|',
      ...conns.rows.map((r) => `| ${r.request} | ${r.samples} | ${r.perRequest} | ${r.httpStatementsPerRequest} | ${r.peakOpen} |`),
    ];
    for (const [path, byKind] of failures) for (const [kind, { count, example }] of byKind) lines.push('', `${path}: ${count} × ${kind}: ${example}`);
    console.log(lines.join('\n'));
    await mkdir('bench/results', { recursive: true });
    await writeFile(
      'bench/results/edge.json',
      `${JSON.stringify({ measuredAt: new Date().toISOString(), rounds: ROUNDS, maxTokens: MAX_TOKENS, latency: rows, connections: conns }, null, 2)}\n`,
    );
  } finally {
    await stopSpawned();
    await edge?.mf.dispose().catch(() => {});
    await edge?.fixture.stop().catch(() => {});
    await nodeDb.drop().catch(() => {});
    await rm(work, { recursive: true, force: true });
  }
}

await main();
