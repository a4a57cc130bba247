import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createTestDatabase } from '../helpers/pg.js';
import { nginxMissing, startNginx, type Peer } from './peers/nginx.js';
import { sshMissing, startSshTunnel } from './peers/ssh.js';
import { cpuSince, loadAverage, snapshot, type Tracked } from './proc-cpu.js';
import { startLunaNexa } from './relay-lunanexa.js';
import { addSample, dispatcher, emptySample, failures, window, type Sample, type Target } from './relay-load.js';
import { baseline, baselineTable, realisticTable, roundsTable, toRow, worstTable, type Row } from './relay-report.js';
import { stopSpawned } from './spawned.js';

/**
 * `npm run bench:relay`: streamed chat completions from simulated runtimes, measured side by side in interleaved
 * rounds on every path from client to runtime: direct, nginx in front of the runtime (the conventional inbound
 * design), an `ssh -R` reverse tunnel (the classic way through a firewall), LunaNexa on one instance, and LunaNexa
 * across two instances on one PostgreSQL (client on A, node attached to B). Two profiles: the worst case (tokens as
 * fast as the runtime can write them, so every per-request cost shows at full weight) and a realistic one (one
 * chunk per token every 20 ms, many concurrent streams). CPU time of every process comes from /proc around each
 * round. Prints markdown tables and writes bench/results/relay.json.
 */
const PG_URL = process.env.LUNANEXA_TEST_PG_URL ?? 'postgres://lunanexa:lunanexa@127.0.0.1:5432/postgres';
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
/** Requests per round, for a quick try; by default they scale with the concurrency. */
const REQUESTS = process.env.BENCH_REQUESTS ? Number(process.env.BENCH_REQUESTS) : null;

interface Profile {
  key: 'worst' | 'realistic';
  /** The deployment (and runtime model) that serves it. */
  model: string;
  tokensPerSecond: number;
  maxTokens: number;
  concurrency: number[];
  requests: (concurrency: number) => number;
}

const PROFILES: Profile[] = [
  {
    key: 'worst',
    model: 'bench',
    tokensPerSecond: 0,
    maxTokens: Number(process.env.BENCH_TOKENS ?? 128),
    concurrency: (process.env.BENCH_CONCURRENCY ?? '1,64,256').split(',').map(Number),
    requests: (c) => REQUESTS ?? (c === 1 ? 60 : c * 3),
  },
  {
    key: 'realistic',
    model: 'bench-paced',
    tokensPerSecond: 50,
    maxTokens: 200,
    concurrency: [Number(process.env.BENCH_STREAMS ?? 256)],
    // Two waves of streams: the second starts as the first ends, so the round holds about `c` streams throughout.
    requests: (c) => REQUESTS ?? c * 2,
  },
];
const PATH_KEYS = ['direct', 'nginx', 'ssh', 'lunanexa1', 'lunanexa2'] as const;
type PathKey = (typeof PATH_KEYS)[number];

const profileChoice = process.env.BENCH_PROFILE ?? 'both';
const profiles = PROFILES.filter((p) => profileChoice === 'both' || profileChoice === p.key);
const pathKeys = (process.env.BENCH_PATHS?.split(',') ?? PATH_KEYS) as PathKey[];
if (profiles.length === 0 || pathKeys.some((k) => !PATH_KEYS.includes(k))) {
  throw new Error(`BENCH_PROFILE is worst, realistic or both; BENCH_PATHS is a subset of ${PATH_KEYS.join(',')}`);
}

interface Path {
  key: PathKey;
  /** The process groups this path adds between client and runtime. */
  onPath: string[];
  target: (profile: Profile) => Target;
}

let root = '';
let keepLogs = false;
let interrupted = false;
let dropDatabase: (() => Promise<void>) | null = null;
let cleaning: Promise<void> | null = null;
function cleanUp(): Promise<void> {
  cleaning ??= (async () => {
    await stopSpawned();
    await dispatcher.close().catch(() => {});
    await dropDatabase?.().catch(() => {});
    // The logs stay when a request failed: they are how the failure is explained (an interrupted run's are not).
    if (root && (!keepLogs || interrupted)) await rm(root, { recursive: true, force: true });
  })();
  return cleaning;
}
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    interrupted = true;
    void cleanUp().finally(() => process.exit(130));
  });
}

async function main(): Promise<void> {
  root = await mkdtemp(join(tmpdir(), 'lnx-bench-relay-'));
  await mkdir(join(root, 'logs'));
  await mkdir(join(root, 'state'), { mode: 0o700 });
  const db = await createTestDatabase(PG_URL);
  dropDatabase = db.drop;
  await measure(join(root, 'logs'), join(root, 'state'), db.url);
}

async function measure(logs: string, state: string, databaseUrl: string): Promise<void> {
  const lunanexa = await startLunaNexa({
    databaseUrl,
    logs,
    state,
    twoInstances: pathKeys.includes('lunanexa2'),
    deployments: profiles.map((p) => ({ model: p.model, tokensPerSecond: p.tokensPerSecond })),
  });
  const runtimePort = (p: Profile) => lunanexa.runtimePorts.get(p.model)!;
  const ports = profiles.map(runtimePort);
  const tracked: Tracked[] = [...lunanexa.processes, { name: 'client', pids: () => [process.pid] }];
  const paths: Path[] = [];
  const peer = async (key: PathKey, onPath: string[], missing: string | null, start: () => Promise<Peer>) => {
    if (!pathKeys.includes(key)) return;
    if (missing) {
      console.log(`${key} path skipped: ${missing}`);
      return;
    }
    const started = await start();
    tracked.push(...started.processes);
    paths.push({ key, onPath, target: (p) => ({ url: started.urls.get(runtimePort(p))!, token: null, model: p.model, maxTokens: p.maxTokens }) });
  };
  if (pathKeys.includes('direct')) paths.push({ key: 'direct', onPath: [], target: (p) => ({ url: `http://127.0.0.1:${runtimePort(p)}`, token: null, model: p.model, maxTokens: p.maxTokens }) });
  await peer('nginx', ['nginx'], nginxMissing(), () => startNginx(state, ports));
  await peer('ssh', ['sshd', 'ssh'], sshMissing(), () => startSshTunnel(state, ports));
  const { b, a } = lunanexa;
  if (pathKeys.includes('lunanexa1')) paths.push({ key: 'lunanexa1', onPath: ['control plane', 'agent'], target: (p) => ({ url: b.url, token: b.token, model: p.model, maxTokens: p.maxTokens }) });
  // Across instances the payload and the frames pass through PostgreSQL: its backends for the bench's database are on the path.
  if (a) paths.push({ key: 'lunanexa2', onPath: ['control plane A', 'control plane', 'agent', 'postgres'], target: (p) => ({ url: a.url, token: a.token, model: p.model, maxTokens: p.maxTokens }) });

  const rows: Row[] = [];
  const rounds: Row[] = [];
  const tables: string[] = [];
  for (const profile of profiles) {
    // Warm every path (JIT, connection pools) before measuring.
    for (const path of paths) await window(`${path.key} (warm-up)`, path.target(profile), 8, REQUESTS ?? 16);
    for (const concurrency of profile.concurrency) {
      const totals = new Map<PathKey, { sample: Sample; cpuMs: Record<string, number>; loads: number[] }>();
      for (let round = 0; round < ROUNDS; round += 1) {
        // Interleave, rotating the order so that no path always runs first or last.
        for (const path of paths.map((_, i) => paths[(i + round) % paths.length]!)) {
          if (interrupted) return;
          const before = snapshot(tracked);
          const sample = await window(path.key, path.target(profile), concurrency, profile.requests(concurrency));
          const cpuMs = cpuSince(before, tracked);
          const load = loadAverage();
          const row = toRow({ profile: profile.key, path: path.key, concurrency, round: round + 1, onPath: path.onPath, loadAverage1m: [load] }, sample, cpuMs);
          rounds.push(row);
          const total = totals.get(path.key) ?? { sample: emptySample(), cpuMs: {}, loads: [] };
          totals.set(path.key, total);
          addSample(total.sample, sample);
          for (const [name, ms] of Object.entries(cpuMs)) total.cpuMs[name] = (total.cpuMs[name] ?? 0) + ms;
          total.loads.push(load);
          process.stderr.write(
            `${profile.key} c=${concurrency} round ${round + 1} ${path.key}: ${Math.round(row.tokensPerSecond)} tok/s, ${row.pathCpuMsPerRequest.toFixed(3)} CPU ms/req on path, errors ${row.errors}, load ${load}\n`,
          );
        }
      }
      for (const path of paths) {
        const total = totals.get(path.key)!;
        rows.push(toRow({ profile: profile.key, path: path.key, concurrency, round: null, onPath: path.onPath, loadAverage1m: total.loads }, total.sample, total.cpuMs));
      }
    }
    const mine = rows.filter((r) => r.profile === profile.key);
    tables.push(
      profile.key === 'worst'
        ? `### Worst case: ${profile.maxTokens} tokens as fast as the runtime writes them, ${ROUNDS} interleaved rounds`
        : `### Realistic: one chunk per token every 20 ms, ${profile.maxTokens} tokens, ${profile.concurrency.join(', ')} concurrent streams, ${ROUNDS} interleaved rounds`,
      '',
      ...(profile.key === 'worst' ? worstTable(mine) : realisticTable(mine)),
      '',
    );
  }
  const measures = baseline(rows, rounds);
  tables.push('### Issue 12 targets, today', '', ...baselineTable(measures), '', '### Every round', '', ...roundsTable(rounds), '');
  console.log(`\n${tables.join('\n')}`);

  const failed = [...failures].map(([path, kinds]) => ({ path, kinds: [...kinds].map(([kind, { count, example }]) => ({ kind, count, example })) }));
  for (const { path, kinds } of failed) for (const k of kinds) console.log(`failure on ${path} x${k.count}: ${k.kind}: ${k.example}`);
  if (failed.length > 0) {
    keepLogs = true;
    console.log(`kept for the failures: logs of the control planes and the agent (each failed request of its own included) in ${join(root, 'logs')}, of nginx and sshd in ${state}`);
  }
  const everything = profiles.length === PROFILES.length && paths.length === PATH_KEYS.length;
  if (!everything) {
    console.log('(a subset of profiles or paths: bench/results/relay.json is left as it is)');
    return;
  }
  await mkdir('bench/results', { recursive: true });
  const settings = { rounds: ROUNDS, profiles: profiles.map((p) => ({ ...p, requests: Object.fromEntries(p.concurrency.map((c) => [c, p.requests(c)])) })) };
  await writeFile('bench/results/relay.json', `${JSON.stringify({ measuredAt: new Date().toISOString(), command: 'npm run bench:relay', settings, baseline: measures, rows, rounds, failures: failed }, null, 2)}\n`);
}

try {
  await main();
} finally {
  await cleanUp();
}
