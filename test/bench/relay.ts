import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createTestDatabase } from '../helpers/pg.js';
import { nginxMissing, startNginx, type Peer } from './peers/nginx.js';
import { sshMissing, startSshTunnel } from './peers/ssh.js';
import { cpuSince, loadAverage, snapshot, type Tracked } from './proc-cpu.js';
import { buildIn, checkOut, resolveRevision } from './relay-baseline.js';
import { currentBundles, startLunaNexa, type Bundles, type LunaNexa } from './relay-lunanexa.js';
import { addSample, dispatcher, emptySample, failures, window, type Sample, type Target } from './relay-load.js';
import { baseline, baselineTable, realisticTable, roundsTable, toRow, worstTable, type Row, type Variant } from './relay-report.js';
import { stopSpawned } from './spawned.js';

/**
 * `npm run bench:relay`: streamed chat completions from simulated runtimes, measured side by side in interleaved
 * rounds on every path from client to runtime: direct, nginx in front of the runtime (the conventional inbound
 * design), an `ssh -R` reverse tunnel (the classic way through a firewall), LunaNexa on one instance, and LunaNexa
 * across two instances on one PostgreSQL (client on A, node attached to B). Two profiles: the worst case (tokens as
 * fast as the runtime can write them, so every per-request cost shows at full weight) and a realistic one (one
 * chunk per token every 20 ms, many concurrent streams). CPU time of every process comes from /proc around each
 * round. Prints markdown tables and writes bench/results/relay.json.
 *
 * BENCH_BASELINE=<git revision> adds `before1` and `before2`: the same two LunaNexa setups run from the bundles of
 * that revision (built in a temporary git worktree by its own build script), each setup on its own database, so
 * that one interleaved run measures before and after side by side.
 */
const PG_URL = process.env.LUNANEXA_TEST_PG_URL ?? 'postgres://lunanexa:lunanexa@127.0.0.1:5432/postgres';
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
/** Unmeasured requests per path at c=64 before the worst-case rounds. */
const WARMUP = Number(process.env.BENCH_WARMUP ?? 2_000);
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
const PATH_KEYS = ['direct', 'nginx', 'ssh', 'lunanexa1', 'lunanexa2', 'before1', 'before2'] as const;
type PathKey = (typeof PATH_KEYS)[number];
const BASELINE = process.env.BENCH_BASELINE || null;
/** Every path of this run's kind: the `before` ones only against a baseline revision. */
const allKeys = PATH_KEYS.filter((k) => BASELINE || !k.startsWith('before'));

const profileChoice = process.env.BENCH_PROFILE ?? 'both';
const profiles = PROFILES.filter((p) => profileChoice === 'both' || profileChoice === p.key);
const pathKeys = (process.env.BENCH_PATHS?.split(',') ?? allKeys) as PathKey[];
if (profiles.length === 0 || pathKeys.some((k) => !allKeys.includes(k))) {
  throw new Error(
    `BENCH_PROFILE is worst, realistic or both; BENCH_PATHS is a subset of ${PATH_KEYS.join(',')} (before1 and before2 with BENCH_BASELINE=<git revision>)`,
  );
}

interface Path {
  key: PathKey;
  /** How tables name it. */
  label: string;
  /** The process groups this path adds between client and runtime, and the runtime's. */
  onPath: string[];
  runtime: string;
  target: (profile: Profile) => Target;
}

/** One LunaNexa installation: its own bundles, database, state and logs (under `dir`), and its two paths. */
interface Setup extends Variant {
  one: PathKey;
  two: PathKey;
  dir: string;
  bundles: () => Promise<Bundles>;
}

let root = '';
let keepLogs = false;
let interrupted = false;
/** What undoes the setup (databases, the baseline's worktree), once the processes are stopped: last first. */
const undo: Array<() => Promise<void>> = [];
let cleaning: Promise<void> | null = null;
function cleanUp(): Promise<void> {
  cleaning ??= (async () => {
    await stopSpawned();
    await dispatcher.close().catch(() => {});
    for (const step of undo.reverse()) await step().catch((error: unknown) => console.error('clean-up:', error));
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
  const before = BASELINE ? await resolveRevision(BASELINE) : null;
  const setups: Setup[] = [{ one: 'lunanexa1', two: 'lunanexa2', dir: '', tag: '', label: before ? ' (after: working tree)' : '', bundles: currentBundles }];
  if (before) {
    setups.push({
      one: 'before1',
      two: 'before2',
      dir: 'before',
      tag: ' (before)',
      label: ` (before ${before.short})`,
      bundles: async () => {
        const tree = await checkOut(before.commit);
        undo.push(tree.remove);
        return buildIn(tree.dir);
      },
    });
  }
  await measure(join(root, 'logs'), join(root, 'state'), setups, before && { revision: BASELINE!, commit: before.commit });
}

async function measure(logs: string, state: string, setups: Setup[], before: { revision: string; commit: string } | null): Promise<void> {
  // The setups whose paths run; direct, nginx and ssh reach the runtimes of the first (the working tree's, unless only `before` paths were asked for).
  const wanted = setups.filter((s) => pathKeys.includes(s.one) || pathKeys.includes(s.two));
  if (wanted.length === 0) wanted.push(setups[0]!);
  const started = new Map<Setup, LunaNexa>();
  for (const setup of wanted) {
    await mkdir(join(logs, setup.dir), { recursive: true });
    await mkdir(join(state, setup.dir), { recursive: true, mode: 0o700 });
    const bundles = await setup.bundles();
    const db = await createTestDatabase(PG_URL);
    undo.push(db.drop);
    started.set(
      setup,
      await startLunaNexa({
        bundles,
        tag: setup.tag,
        databaseUrl: db.url,
        logs: join(logs, setup.dir),
        state: join(state, setup.dir),
        twoInstances: pathKeys.includes(setup.two),
        deployments: profiles.map((p) => ({ model: p.model, tokensPerSecond: p.tokensPerSecond })),
      }),
    );
  }
  const first = started.get(wanted[0]!)!;
  const runtime = `runtime${wanted[0]!.tag}`;
  const runtimePort = (p: Profile) => first.runtimePorts.get(p.model)!;
  const ports = profiles.map(runtimePort);
  const tracked: Tracked[] = [...[...started.values()].flatMap((l) => l.processes), { name: 'client', pids: () => [process.pid] }];
  const paths: Path[] = [];
  const peer = async (key: PathKey, onPath: string[], missing: string | null, start: () => Promise<Peer>) => {
    if (!pathKeys.includes(key)) return;
    if (missing) {
      console.log(`${key} path skipped: ${missing}`);
      return;
    }
    const peerStarted = await start();
    tracked.push(...peerStarted.processes);
    paths.push({
      key,
      label: key,
      onPath,
      runtime,
      target: (p) => ({ url: peerStarted.urls.get(runtimePort(p))!, token: null, model: p.model, maxTokens: p.maxTokens }),
    });
  };
  if (pathKeys.includes('direct'))
    paths.push({
      key: 'direct',
      label: 'direct',
      onPath: [],
      runtime,
      target: (p) => ({ url: `http://127.0.0.1:${runtimePort(p)}`, token: null, model: p.model, maxTokens: p.maxTokens }),
    });
  await peer('nginx', ['nginx'], nginxMissing(), () => startNginx(state, ports));
  await peer('ssh', ['sshd', 'ssh'], sshMissing(), () => startSshTunnel(state, ports));
  for (const [setup, { b, a }] of started) {
    const names = (...groups: string[]) => groups.map((g) => `${g}${setup.tag}`);
    const label = (key: PathKey, what: string) => (before ? `${what}${setup.label}` : key);
    const via = (instance: { url: string; token: string }) => (p: Profile) => ({
      url: instance.url,
      token: instance.token,
      model: p.model,
      maxTokens: p.maxTokens,
    });
    if (pathKeys.includes(setup.one))
      paths.push({
        key: setup.one,
        label: label(setup.one, 'LunaNexa 1 instance'),
        onPath: names('control plane', 'agent'),
        runtime: `runtime${setup.tag}`,
        target: via(b),
      });
    // Across instances the payload and the frames pass through PostgreSQL: its backends for the setup's database are on the path.
    if (a)
      paths.push({
        key: setup.two,
        label: label(setup.two, 'LunaNexa 2 instances'),
        onPath: names('control plane A', 'control plane', 'agent', 'postgres'),
        runtime: `runtime${setup.tag}`,
        target: via(a),
      });
  }

  const rows: Row[] = [];
  const rounds: Row[] = [];
  const tables: string[] = [];
  for (const profile of profiles) {
    // Warm every path before measuring: connection pools, and the JIT, which optimises a hot function only after
    // thousands of calls; a long-running control plane is measured in its steady state, not its first minute.
    // The worst case warms with WARMUP requests (its rounds are short); the realistic one with a few.
    const warmup = profile.key === 'worst' ? { concurrency: 64, requests: REQUESTS ?? WARMUP } : { concurrency: 8, requests: REQUESTS ?? 16 };
    for (const path of paths) await window(`${path.key} (warm-up)`, path.target(profile), warmup.concurrency, warmup.requests);
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
          const row = toRow(
            {
              profile: profile.key,
              path: path.key,
              label: path.label,
              runtime: path.runtime,
              concurrency,
              round: round + 1,
              onPath: path.onPath,
              loadAverage1m: [load],
            },
            sample,
            cpuMs,
          );
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
        rows.push(
          toRow(
            {
              profile: profile.key,
              path: path.key,
              label: path.label,
              runtime: path.runtime,
              concurrency,
              round: null,
              onPath: path.onPath,
              loadAverage1m: total.loads,
            },
            total.sample,
            total.cpuMs,
          ),
        );
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
  const measures = baseline(rows, rounds, setups);
  tables.push('### Issue 12 targets, today', '', ...baselineTable(measures), '', '### Every round', '', ...roundsTable(rounds), '');
  console.log(`\n${tables.join('\n')}`);

  const failed = [...failures].map(([path, kinds]) => ({ path, kinds: [...kinds].map(([kind, { count, example }]) => ({ kind, count, example })) }));
  for (const { path, kinds } of failed) for (const k of kinds) console.log(`failure on ${path} x${k.count}: ${k.kind}: ${k.example}`);
  if (failed.length > 0) {
    keepLogs = true;
    console.log(
      `kept for the failures: logs of the control planes and the agent (each failed request of its own included) in ${join(root, 'logs')}, of nginx and sshd in ${state}`,
    );
  }
  const everything = profiles.length === PROFILES.length && paths.length === allKeys.length;
  if (!everything) {
    console.log('(a subset of profiles or paths: bench/results/relay.json is left as it is)');
    return;
  }
  await mkdir('bench/results', { recursive: true });
  const settings = {
    rounds: ROUNDS,
    ...(before ? { before } : {}),
    profiles: profiles.map((p) => ({ ...p, requests: Object.fromEntries(p.concurrency.map((c) => [c, p.requests(c)])) })),
  };
  await writeFile(
    'bench/results/relay.json',
    `${JSON.stringify({ measuredAt: new Date().toISOString(), command: 'npm run bench:relay', settings, baseline: measures, rows, rounds, failures: failed }, null, 2)}\n`,
  );
}

try {
  await main();
} catch (error) {
  // A setup that did not start (a bundle that fails to build or to route) is explained by its logs too.
  if (root && !interrupted) {
    keepLogs = true;
    console.error(`kept for the failure: logs of the control planes and the agent in ${join(root, 'logs')}`);
  }
  throw error;
} finally {
  await cleanUp();
}
