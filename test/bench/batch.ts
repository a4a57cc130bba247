import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI, { toFile } from 'openai';
import { freePort } from '../../agent/runtimes/process.js';
import { enrollAgent } from '../../agent/enroll.js';
import { writeSimPolicy } from '../../functions/hosts/dev/fleet.js';
import { JobSpec } from '../../shared/batch/job.js';
import type { DeploymentDetail } from '../../shared/contracts/deployment.js';
import { waitFor } from '../helpers/plane.js';
import { cpuSince, loadAverage, snapshot, withDescendants, type Tracked } from './proc-cpu.js';
import { spawnLogged, stopSpawned } from './spawned.js';

/**
 * `npm run bench:batch` (issue 20): rows through the OpenAI Batch API against simulated runtimes that behave like a
 * GPU (a time to first token, a pace per token, a concurrency per replica that bounds throughput), measured beside the
 * same rows sent by a plain client loop at the runner's concurrency, in interleaved rounds; then the TTFT of a steady
 * interactive load alone and while a batch runs on the same replicas, interleaved too. The control plane (embedded
 * store, default timings) runs in a process of its own, so that its CPU per row is its own and not the client loop's;
 * two simulated nodes are real agent processes. CPU time comes from /proc around each round: the plane's own, its
 * runners' (reaped children, whose time the kernel adds to the plane's cutime/cstime when they exit), and the nodes'
 * (agents and their runtimes). Prints markdown tables and writes bench/results/batch.json.
 */
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const ROWS = Number(process.env.BENCH_ROWS ?? 2_000);
const TTFT_SECONDS = Number(process.env.BENCH_TTFT_SECONDS ?? 6);
/** The runner's concurrency when a batch names none: the client loop sends as many at once. */
const CONCURRENCY = JobSpec.parse({ kind: 'openai-batch', endpoint: '/v1/chat/completions', inputFileId: 'file_bench' }).concurrency;

/**
 * A small model on a GPU: 50 ms to the first token, then 100 tokens a second per stream, at most 6 streams per
 * replica. Two replicas hold 12 rows at once, fewer than the 16 a runner sends: the replicas, not the senders or the
 * plane's CPU, bound throughput, and rows wait in the replicas' queues as they would for a GPU.
 */
const RUNTIME = { kind: 'simulated', model: 'sim-chat', ttftMs: 50, tokensPerSecond: 100, loadMs: 300, memoryMiB: 64 } as const;
const REPLICAS = 2;
const MAX_CONCURRENCY = 6;
const ROW_TOKENS = 4;
const ROW_MS = RUNTIME.ttftMs + ((ROW_TOKENS - 1) * 1000) / RUNTIME.tokensPerSecond;
/** What the replicas can answer at most, rows a second. */
const CEILING = (REPLICAS * MAX_CONCURRENCY * 1000) / ROW_MS;

/** The interactive load: streaming chat clients, each sending one request after another. */
const INTERACTIVE = { clients: 4, maxTokens: 16, pauseMs: 50 };
/** The batch that runs beside the interactive load: twice what the replicas can do in the window, cancelled after it. */
const TTFT_BATCH_ROWS = Math.ceil(2 * TTFT_SECONDS * CEILING);
/** How often a batch is polled: each end of its timing is up to this late. */
const POLL_MS = 100;

const rowBody = (i: number) => ({ model: 'sim-chat', messages: [{ role: 'user', content: `row ${i}` }], max_tokens: ROW_TOKENS });
const jsonl = (rows: number) =>
  `${Array.from({ length: rows }, (_, i) => JSON.stringify({ custom_id: `row-${i}`, method: 'POST', url: '/v1/chat/completions', body: rowBody(i) })).join('\n')}\n`;

/** A process's reaped children's CPU ms (cutime + cstime, /proc/<pid>/stat fields 16 and 17), which proc-cpu.ts does not read. */
const MS_PER_TICK = 1000 / Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());
function reapedChildrenCpuMs(pid: number): number {
  const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[13]) + Number(fields[14])) * MS_PER_TICK;
}

const percentile = (sorted: number[], q: number) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]! : 0);
const round1 = (v: number) => Math.round(v * 10) / 10;
const round2 = (v: number) => Math.round(v * 100) / 100;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let root = '';
let interrupted = false;
/** A failed run keeps the plane's and the agents' logs: they are how it is explained. */
let keepLogs = false;
const spawnedPids: number[] = [];
let cleaning: Promise<void> | null = null;
/**
 * Stops the plane (which stops its runners) and the agents (which stop their runtimes); a runner or runtime that
 * outlived its parent (killed after the grace period) is killed by its pid, found before the stop.
 */
function cleanUp(): Promise<void> {
  cleaning ??= (async () => {
    const below = spawnedPids.flatMap((pid) => withDescendants(pid).slice(1));
    await stopSpawned(15_000);
    for (const pid of below) {
      const line = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
      if (!line.includes('lunanexa-runner') && !line.includes('sim-runtime')) continue;
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // It exited meanwhile.
      }
    }
    if (root && !keepLogs) await rm(root, { recursive: true, force: true });
  })();
  return cleaning;
}
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    interrupted = true;
    void cleanUp().finally(() => process.exit(130));
  });
}

interface Plane {
  url: string;
  token: string;
  pid: number;
}

/** The control plane as production runs it (functions/hosts/node.ts), on the embedded store in `dir`. */
async function startPlane(dir: string): Promise<Plane> {
  const port = await freePort();
  const dataDir = join(dir, 'plane');
  const entry = fileURLToPath(new URL('../../functions/hosts/node.ts', import.meta.url));
  // DATABASE_URL unset: the embedded store.
  const env = { DATABASE_URL: undefined, LUNANEXA_PORT: String(port), LUNANEXA_DATA_DIR: dataDir, LUNANEXA_LOG_LEVEL: 'warn' };
  const child = spawnLogged(process.execPath, ['--import', 'tsx', entry], env, join(dir, 'plane.log'));
  spawnedPids.push(child.pid!);
  const url = `http://127.0.0.1:${port}`;
  await waitFor(async () => (await fetch(`${url}/readyz`)).ok, { timeoutMs: 90_000, intervalMs: 200, what: 'the control plane ready' });
  return { url, token: (await readFile(join(dataDir, 'admin.token'), 'utf8')).trim(), pid: child.pid! };
}

/** A simulated node as `startSimNode` makes one, enrolled over the management API since the plane is not in this process. */
async function startNode(plane: Plane, dir: string, name: string): Promise<number> {
  const enrollment = await api(plane, '/api/v1/enrollment-tokens', { method: 'POST', body: JSON.stringify({ name, labels: { sim: 'true' } }) });
  const { token } = (await enrollment.json()) as { token: string };
  const stateDir = join(dir, name);
  await mkdir(stateDir, { recursive: true, mode: 0o700 });
  const nvidiaSmi = fileURLToPath(new URL('../../sim/nvidia-smi.mjs', import.meta.url));
  await enrollAgent({ url: plane.url, token, name, stateDir, log: () => {}, nvidiaSmi });
  const agent = fileURLToPath(new URL('../../agent/main.ts', import.meta.url));
  const child = spawnLogged(
    process.execPath,
    ['--import', 'tsx', agent, 'run', '--state-dir', stateDir, '--policy', await writeSimPolicy(stateDir), '--stop-runtimes-on-exit'],
    { LUNANEXA_AGENT_NVIDIA_SMI: nvidiaSmi },
    join(dir, `${name}.log`),
  );
  spawnedPids.push(child.pid!);
  return child.pid!;
}

async function api(plane: Plane, path: string, init: RequestInit = {}): Promise<Response> {
  const response = await fetch(`${plane.url}${path}`, { ...init, headers: { authorization: `Bearer ${plane.token}`, 'content-type': 'application/json' } });
  if (!response.ok) throw new Error(`${init.method ?? 'GET'} ${path}: ${response.status} ${await response.text()}`);
  return response;
}

interface ThroughputRow {
  round: number | null;
  sender: 'batch' | 'loop';
  rows: number;
  errors: number;
  wallS: number;
  rowsPerSecond: number;
  /** Batch only: from `batches.create` to the first row counted (checkpointed), and from the last one to `completed`. */
  firstRowS: number | null;
  finalizeS: number | null;
  planeCpuUsPerRow: number;
  /** The runner process (batch) or this process, the client loop (loop). */
  senderCpuUsPerRow: number;
  nodesCpuUsPerRow: number;
  loadAverage1m: number[];
}

interface TtftRow {
  round: number | null;
  condition: 'alone' | 'with batch';
  requests: number;
  errors: number;
  p50Ms: number;
  p95Ms: number;
  p99Ms: number;
  maxMs: number;
  /** Of the TTFT: the wait for a replica's slot, as the plane timed it. */
  slotWaitP50Ms: number;
  slotWaitP99Ms: number;
  /** The plane's event-loop delay during the window. */
  loopDelayP99Ms: number;
  loopDelayMaxMs: number;
  /** Rows the batch finished while the window ran (with batch only). */
  batchRowsPerSecond: number | null;
  loadAverage1m: number[];
}

/** What the interactive clients saw in one window. */
interface Window {
  ttfts: number[];
  waits: number[];
  errors: number;
}

async function main(): Promise<void> {
  root = await mkdtemp(join(tmpdir(), 'lnx-bench-batch-'));
  const plane = await startPlane(root);
  await api(plane, '/api/v1/deployments/sim-chat', {
    method: 'PUT',
    body: JSON.stringify({ model: 'sim-chat', runtime: RUNTIME, replicas: REPLICAS, selector: { sim: 'true' }, maxConcurrency: MAX_CONCURRENCY }),
  });
  const agents = [await startNode(plane, root, 'gpu-1'), await startNode(plane, root, 'gpu-2')];
  await waitFor(async () => ((await (await api(plane, '/api/v1/deployments/sim-chat')).json()) as DeploymentDetail).status.ready === REPLICAS, {
    timeoutMs: 120_000,
    intervalMs: 200,
    what: `${REPLICAS} sim-chat replicas ready`,
  });
  const client = new OpenAI({ baseURL: `${plane.url}/v1`, apiKey: plane.token, maxRetries: 0 });
  const tracked: Tracked[] = [
    { name: 'plane', pids: () => [plane.pid] },
    { name: 'client', pids: () => [process.pid] },
    { name: 'nodes', pids: () => agents.flatMap(withDescendants) },
  ];
  const upload = async (rows: number) => (await client.files.create({ file: await toFile(Buffer.from(jsonl(rows)), 'rows.jsonl'), purpose: 'batch' })).id;
  const rowsFile = await upload(ROWS);
  const ttftFile = await upload(TTFT_BATCH_ROWS);

  const headers = { authorization: `Bearer ${plane.token}`, 'content-type': 'application/json' };
  /**
   * The same requests as the batch's runner sends, `CONCURRENCY` at once, each sent as soon as one answered, in the
   * batch lane as the runner's: admission treats both senders alike, and the loop's rows are no interactive traffic
   * for which replicas would keep slots from the batch that follows them.
   */
  const rowHeaders = { ...headers, 'x-lunanexa-lane': 'batch' };
  const loop = async (rows: number) => {
    let next = 0;
    let errors = 0;
    const worker = async () => {
      while (next < rows) {
        const body = JSON.stringify(rowBody(next++));
        const answer = await fetch(`${plane.url}/v1/chat/completions`, { method: 'POST', headers: rowHeaders, body }).catch(() => null);
        await answer?.text();
        if (answer?.status !== 200) errors += 1;
      }
    };
    await Promise.all(Array.from({ length: CONCURRENCY }, worker));
    return errors;
  };

  /**
   * Polls a batch until it ends (or `stopWhen`): when its first rows were counted, when all its `rows` were, and how it
   * ended. `rows` is the caller's: the batch's `total` is only the rows counted so far until its runner read its input to the end.
   */
  const follow = async (id: string, rows: number, stopWhen: (b: OpenAI.Batches.Batch) => boolean = () => false) => {
    let firstRowAt: number | null = null;
    let allRowsAt: number | null = null;
    for (;;) {
      const batch = await client.batches.retrieve(id);
      const counted = batch.request_counts!.completed + batch.request_counts!.failed;
      if (counted > 0) firstRowAt ??= performance.now();
      if (counted >= rows) allRowsAt ??= performance.now();
      if (['completed', 'failed', 'cancelled', 'expired'].includes(batch.status) || stopWhen(batch)) return { batch, firstRowAt, allRowsAt };
      await sleep(POLL_MS);
    }
  };

  // Unmeasured: the plane's hot paths compiled, and the runner's TypeScript in tsx's cache, as on a plane that has run batches.
  await loop(200);
  const warm = await follow(
    (await client.batches.create({ input_file_id: await upload(100), endpoint: '/v1/chat/completions', completion_window: '24h' })).id,
    100,
  );
  if (warm.batch.status !== 'completed') throw new Error(`the warm-up batch ended ${warm.batch.status}`);

  const throughput: ThroughputRow[] = [];
  const measureSender = async (sender: 'batch' | 'loop', round: number): Promise<ThroughputRow> => {
    const before = snapshot(tracked);
    const reapedBefore = reapedChildrenCpuMs(plane.pid);
    const started = performance.now();
    let errors: number;
    let firstRowS: number | null = null;
    let finalizeS: number | null = null;
    if (sender === 'batch') {
      const created = await client.batches.create({ input_file_id: rowsFile, endpoint: '/v1/chat/completions', completion_window: '24h' });
      const { batch, firstRowAt, allRowsAt } = await follow(created.id, ROWS);
      if (batch.status !== 'completed') throw new Error(`batch ${batch.id} ended ${batch.status}`);
      errors = batch.request_counts!.failed;
      firstRowS = (firstRowAt! - started) / 1000;
      finalizeS = (performance.now() - allRowsAt!) / 1000;
    } else errors = await loop(ROWS);
    const wallS = (performance.now() - started) / 1000;
    const cpu = cpuSince(before, tracked);
    const perRow = (ms: number) => Math.round((ms * 1000) / ROWS);
    const row: ThroughputRow = {
      round,
      sender,
      rows: ROWS,
      errors,
      wallS: round2(wallS),
      rowsPerSecond: round1(ROWS / wallS),
      firstRowS: firstRowS === null ? null : round2(firstRowS),
      finalizeS: finalizeS === null ? null : round2(finalizeS),
      planeCpuUsPerRow: perRow(cpu.plane!),
      senderCpuUsPerRow: perRow(sender === 'batch' ? reapedChildrenCpuMs(plane.pid) - reapedBefore : cpu.client!),
      nodesCpuUsPerRow: perRow(cpu.nodes!),
      loadAverage1m: [loadAverage()],
    };
    process.stderr.write(`round ${round} ${sender}: ${row.rowsPerSecond} rows/s, ${row.errors} errors, load ${row.loadAverage1m[0]}\n`);
    return row;
  };
  for (let round = 1; round <= ROUNDS && !interrupted; round += 1) {
    // Interleaved, the order alternating, so that neither sender always runs on a machine the other just warmed or loaded.
    const order: Array<'batch' | 'loop'> = round % 2 === 1 ? ['batch', 'loop'] : ['loop', 'batch'];
    for (const sender of order) throughput.push(await measureSender(sender, round));
  }

  /**
   * `INTERACTIVE.clients` streaming loops for `TTFT_SECONDS`: the time to each answer's first token, and how much of it
   * the request waited for a replica's slot (the `queue` of the plane's Server-Timing header, sent before the first token).
   */
  const interactive = async (): Promise<Window> => {
    const window: Window = { ttfts: [], waits: [], errors: 0 };
    const until = performance.now() + TTFT_SECONDS * 1000;
    const body = JSON.stringify({ model: 'sim-chat', messages: [{ role: 'user', content: 'hello' }], max_tokens: INTERACTIVE.maxTokens, stream: true });
    const worker = async () => {
      while (performance.now() < until) {
        const started = performance.now();
        let ttft: number | null = null;
        try {
          const answer = await fetch(`${plane.url}/v1/chat/completions`, { method: 'POST', headers, body });
          const wait = Number(/queue;dur=([\d.]+)/.exec(answer.headers.get('server-timing') ?? '')?.[1]);
          let seen = '';
          const decoder = new TextDecoder();
          const reader = answer.body!.getReader();
          for (let read = await reader.read(); !read.done; read = await reader.read()) {
            if (ttft !== null) continue;
            // Headers come before the first token (the runtime flushes them at once): the first token is the first content.
            seen += decoder.decode(read.value, { stream: true });
            if (seen.includes('"content":"tok')) ttft = performance.now() - started;
          }
          if (answer.status !== 200 || Number.isNaN(wait)) ttft = null;
          else if (ttft !== null) window.waits.push(wait);
        } catch {
          ttft = null;
        }
        if (ttft === null) window.errors += 1;
        else window.ttfts.push(ttft);
        await sleep(INTERACTIVE.pauseMs);
      }
    };
    await Promise.all(Array.from({ length: INTERACTIVE.clients }, worker));
    return window;
  };
  /**
   * The plane's event-loop delay since the last call, in ms beyond its 10 ms sampling interval: prom-client's
   * monitor, which each scrape of /metrics reads and resets. What the plane's own busy stretches add to a request.
   */
  const loopDelay = async () => {
    const text = await (await api(plane, '/metrics')).text();
    const ms = (name: string) => round1(Number(new RegExp(`^lunanexa_nodejs_eventloop_lag_${name}_seconds (\\S+)$`, 'm').exec(text)?.[1]) * 1000 - 10);
    return { p99Ms: ms('p99'), maxMs: ms('max') };
  };
  const ttftRow = (
    round: number | null,
    condition: TtftRow['condition'],
    window: Window,
    loop: { p99Ms: number; maxMs: number },
    batchRowsPerSecond: number | null,
    loads: number[],
  ): TtftRow => {
    const sorted = [...window.ttfts].sort((a, b) => a - b);
    const waits = [...window.waits].sort((a, b) => a - b);
    return {
      round,
      condition,
      requests: window.ttfts.length + window.errors,
      errors: window.errors,
      p50Ms: round1(percentile(sorted, 0.5)),
      p95Ms: round1(percentile(sorted, 0.95)),
      p99Ms: round1(percentile(sorted, 0.99)),
      maxMs: round1(sorted.at(-1) ?? 0),
      slotWaitP50Ms: round1(percentile(waits, 0.5)),
      slotWaitP99Ms: round1(percentile(waits, 0.99)),
      loopDelayP99Ms: loop.p99Ms,
      loopDelayMaxMs: loop.maxMs,
      batchRowsPerSecond,
      loadAverage1m: loads,
    };
  };
  const ttft: TtftRow[] = [];
  const windows = { alone: [] as Window[], 'with batch': [] as Window[] };
  const measureTtft = async (condition: TtftRow['condition'], round: number) => {
    let batchRowsPerSecond: number | null = null;
    let window: Window;
    let loop: Awaited<ReturnType<typeof loopDelay>>;
    if (condition === 'with batch') {
      const created = await client.batches.create({ input_file_id: ttftFile, endpoint: '/v1/chat/completions', completion_window: '24h' });
      // The window opens once the runner sends at its full concurrency: its first rows are counted.
      const { batch: running } = await follow(created.id, TTFT_BATCH_ROWS, (b) => b.request_counts!.completed > 0);
      if (running.status !== 'in_progress') throw new Error(`batch ${running.id} ended ${running.status} before the window`);
      await loopDelay();
      const started = performance.now();
      window = await interactive();
      loop = await loopDelay();
      const seconds = (performance.now() - started) / 1000;
      const after = await client.batches.retrieve(created.id);
      if (after.status !== 'in_progress') throw new Error(`batch ${created.id} was ${after.status} before the window ended: make it larger`);
      batchRowsPerSecond = round1((after.request_counts!.completed - running.request_counts!.completed) / seconds);
      await client.batches.cancel(created.id);
      const { batch: ended } = await follow(created.id, TTFT_BATCH_ROWS);
      if (ended.status !== 'cancelled') throw new Error(`batch ${created.id} ended ${ended.status}, not cancelled`);
    } else {
      await loopDelay();
      window = await interactive();
      loop = await loopDelay();
    }
    windows[condition].push(window);
    const row = ttftRow(round, condition, window, loop, batchRowsPerSecond, [loadAverage()]);
    process.stderr.write(`round ${round} ${condition}: TTFT p99 ${row.p99Ms} ms over ${row.requests} requests, load ${row.loadAverage1m[0]}\n`);
    return row;
  };
  for (let round = 1; round <= ROUNDS && !interrupted; round += 1) {
    const order: Array<TtftRow['condition']> = round % 2 === 1 ? ['alone', 'with batch'] : ['with batch', 'alone'];
    for (const condition of order) ttft.push(await measureTtft(condition, round));
  }
  if (interrupted) return;

  const throughputAll = (['batch', 'loop'] as const).map((sender): ThroughputRow => {
    const mine = throughput.filter((r) => r.sender === sender);
    const wallS = mine.reduce((s, r) => s + r.wallS, 0);
    const mean = (key: 'planeCpuUsPerRow' | 'senderCpuUsPerRow' | 'nodesCpuUsPerRow') => Math.round(mine.reduce((s, r) => s + r[key], 0) / mine.length);
    const meanS = (key: 'firstRowS' | 'finalizeS') => (sender === 'batch' ? round2(mine.reduce((s, r) => s + r[key]!, 0) / mine.length) : null);
    return {
      round: null,
      sender,
      rows: ROWS * mine.length,
      errors: mine.reduce((s, r) => s + r.errors, 0),
      wallS: round2(wallS),
      rowsPerSecond: round1((ROWS * mine.length) / wallS),
      firstRowS: meanS('firstRowS'),
      finalizeS: meanS('finalizeS'),
      planeCpuUsPerRow: mean('planeCpuUsPerRow'),
      senderCpuUsPerRow: mean('senderCpuUsPerRow'),
      nodesCpuUsPerRow: mean('nodesCpuUsPerRow'),
      loadAverage1m: mine.flatMap((r) => r.loadAverage1m),
    };
  });
  const ttftAll = (['alone', 'with batch'] as const).map((condition) => {
    const mine = ttft.filter((r) => r.condition === condition);
    const rates = mine.map((r) => r.batchRowsPerSecond).filter((r) => r !== null);
    const all: Window = {
      ttfts: windows[condition].flatMap((w) => w.ttfts),
      waits: windows[condition].flatMap((w) => w.waits),
      errors: mine.reduce((s, r) => s + r.errors, 0),
    };
    // Over all rounds: the worst round's event-loop delay.
    const loop = { p99Ms: Math.max(...mine.map((r) => r.loopDelayP99Ms)), maxMs: Math.max(...mine.map((r) => r.loopDelayMaxMs)) };
    const rate = rates.length ? round1(rates.reduce((s, r) => s + r, 0) / rates.length) : null;
    return ttftRow(
      null,
      condition,
      all,
      loop,
      rate,
      mine.flatMap((r) => r.loadAverage1m),
    );
  });
  const [batchAll, loopAll] = throughputAll as [ThroughputRow, ThroughputRow];
  const [aloneAll, withAll] = ttftAll as [TtftRow, TtftRow];
  const summary = {
    batchToLoop: round2(batchAll.rowsPerSecond / loopAll.rowsPerSecond),
    throughputTargetMet: batchAll.rowsPerSecond >= 0.9 * loopAll.rowsPerSecond,
    ttftP99Ratio: round2(withAll.p99Ms / aloneAll.p99Ms),
    ttftTargetMet: withAll.p99Ms <= 1.2 * aloneAll.p99Ms,
  };

  const dash = (v: number | null) => (v === null ? '-' : String(v));
  const loads = (v: number[]) => v.join(', ');
  /** A batch row against the loop of its own round (or of all rounds). */
  const loopOf = (r: ThroughputRow) => (r.round === null ? loopAll : throughput.find((o) => o.round === r.round && o.sender === 'loop')!);
  const ratio = (r: ThroughputRow) => (r.sender === 'batch' ? String(round2(r.rowsPerSecond / loopOf(r).rowsPerSecond)) : '-');
  const tables = [
    `### Throughput: ${ROWS} rows of ${ROW_TOKENS} tokens, batch vs a client loop at ${CONCURRENCY} at once, ${ROUNDS} interleaved rounds (target: batch >= 90 % of the loop's rows/s)`,
    '',
    `Replicas: ${REPLICAS} x ${MAX_CONCURRENCY} concurrent rows, ${RUNTIME.ttftMs} ms to the first token, ${RUNTIME.tokensPerSecond} tokens/s: a row takes ${ROW_MS} ms, at most ${Math.round(CEILING)} rows/s.`,
    '',
    '| round | sent by | rows/s | batch / loop | wall (s) | first row (s) | last row -> completed (s) | errors | plane CPU µs/row | runner or client CPU µs/row | agents + runtimes CPU µs/row | load avg 1 min |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|',
    ...[...throughput, ...throughputAll].map(
      (r) =>
        `| ${r.round ?? 'all'} | ${r.sender} | ${r.rowsPerSecond} | ${ratio(r)} | ${r.wallS} | ${dash(r.firstRowS)} | ${dash(r.finalizeS)} | ${r.errors} | ${r.planeCpuUsPerRow} | ${r.senderCpuUsPerRow} | ${r.nodesCpuUsPerRow} | ${loads(r.loadAverage1m)} |`,
    ),
    '',
    `### Interactive TTFT: ${INTERACTIVE.clients} streaming clients (${INTERACTIVE.maxTokens} tokens, ${INTERACTIVE.pauseMs} ms pause) for ${TTFT_SECONDS} s, alone and beside a batch on the same replicas, ${ROUNDS} interleaved rounds (target: p99 with the batch <= 1.2 x alone)`,
    '',
    '| round | condition | requests | errors | p50 ms | p95 ms | p99 ms | max ms | slot wait p50 / p99 ms | plane event-loop delay p99 / max ms | batch rows/s meanwhile | load avg 1 min |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|',
    ...[...ttft, ...ttftAll].map(
      (r) =>
        `| ${r.round ?? 'all'} | ${r.condition} | ${r.requests} | ${r.errors} | ${r.p50Ms} | ${r.p95Ms} | ${r.p99Ms} | ${r.maxMs} | ${r.slotWaitP50Ms} / ${r.slotWaitP99Ms} | ${r.loopDelayP99Ms} / ${r.loopDelayMaxMs} | ${dash(r.batchRowsPerSecond)} | ${loads(r.loadAverage1m)} |`,
    ),
    '',
    `Batch / loop rows/s: ${summary.batchToLoop} (target >= 0.9: ${summary.throughputTargetMet ? 'met' : 'missed'}). TTFT p99 with a batch / alone: ${summary.ttftP99Ratio} (target <= 1.2: ${summary.ttftTargetMet ? 'met' : 'missed'}).`,
  ];
  console.log(`\n${tables.join('\n')}`);

  await mkdir('bench/results', { recursive: true });
  const parameters = {
    rounds: ROUNDS,
    rows: ROWS,
    rowMaxTokens: ROW_TOKENS,
    concurrency: CONCURRENCY,
    runtime: RUNTIME,
    replicas: REPLICAS,
    maxConcurrency: MAX_CONCURRENCY,
    ceilingRowsPerSecond: Math.round(CEILING),
    interactive: { ...INTERACTIVE, seconds: TTFT_SECONDS, batchRows: TTFT_BATCH_ROWS },
    pollMs: POLL_MS,
  };
  await writeFile(
    'bench/results/batch.json',
    `${JSON.stringify({ measuredAt: new Date().toISOString(), command: 'npm run bench:batch', parameters, summary, throughput: [...throughput, ...throughputAll], ttft: [...ttft, ...ttftAll] }, null, 2)}\n`,
  );
}

try {
  await main();
} catch (error) {
  if (root && !interrupted) {
    keepLogs = true;
    console.error(`kept for the failure: the logs of the control plane and the agents in ${root}`);
  }
  throw error;
} finally {
  await cleanUp();
}
