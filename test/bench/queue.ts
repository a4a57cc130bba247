import { mkdir, writeFile } from 'node:fs/promises';
import { cpuSince, loadAverage, snapshot, type Tracked } from './proc-cpu.js';
import type { QueueMachine } from '../../functions/core/runs/hosts.js';
import { openPass, orderQueue, type QueueInput, type QueuedRun, type QueueWorkspace } from '../../functions/core/runs/queue.js';
import type { GroupDemand } from '../../functions/core/runs/demand.js';
import type { GpuDevice, Inventory } from '../../shared/contracts/inventory.js';

/**
 * `npm run bench:queue`: the pure queue core (`functions/core/runs/queue.ts`) deciding one admission pass as the
 * controller would: BENCH_RUNS (10,000) waiting runs on BENCH_MACHINES (1,000) machines, a decision being the
 * admission or the refusal of one run. The fleet: 70 % machines of 8 GPUs of 80 GiB and 64 cores, 30 % of 4 GPUs of
 * 40 GiB and 32 cores, in three zones, a fifth labelled `ib=yes`, 2 % stale or cordoned, about 60 % of their GPUs
 * already reserved. The runs, from 50 workspaces (weights 1-3, GPU-seconds in the window, ceilings, a third with a
 * GPU quota), at priorities 0-3: 1 to 128 GPUs (most small), workers of 1 GPU or of 8, cores and memory each, a fifth
 * selecting a zone, a tenth `ib=yes`, some needing 80 GiB GPUs, a tenth in two groups, 5 % aged. Measured twice:
 * with those demands, many runs sharing one (refused from memory once the fleet refused it), and with every demand
 * made distinct (memory differing by a MiB), so that each decision looks at every machine. Every pass is
 * deterministic (a fixed seed) and starts from the same fleet. A round orders the queue and decides every run,
 * timing each decision; the ordering counts in decisions per second, not in a decision's latency. CPU per decision
 * is this process's utime + stime (/proc/self/stat) over the round. Unmeasured warm-up round first. Prints a markdown
 * table and writes bench/results/queue.json.
 */
const MACHINES = Number(process.env.BENCH_MACHINES ?? 1_000);
const RUNS = Number(process.env.BENCH_RUNS ?? 10_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const WORKSPACES = 50;
const HOUR = 3_600_000;
const NOW = 1_000 * HOUR;

/** A fixed-seed generator: the same fleet and queue every round and every run of the bench. */
function generator(seed: number) {
  let s = seed;
  return (n: number) => {
    s = (s * 1_103_515_245 + 12_345) % 2 ** 31;
    return Math.floor((s / 2 ** 31) * n);
  };
}

const gpu = (index: number, memoryTotalMiB: number): GpuDevice => ({
  index,
  uuid: `GPU-${index}`,
  name: 'bench GPU',
  memoryTotalMiB,
  memoryUsedMiB: 0,
  unifiedMemory: false,
  driverVersion: null,
  utilizationPercent: null,
  temperatureC: null,
  powerDrawW: null,
});
const inventory = (gpus: number, gpuMiB: number, cpus: number): Inventory => ({
  hostname: 'bench',
  os: 'linux',
  arch: 'x86_64',
  cpus,
  cpuModel: null,
  memoryTotalMiB: 512 * 1024,
  memoryAvailableMiB: null,
  diskFreeMiB: null,
  gpus: Array.from({ length: gpus }, (_, i) => gpu(i, gpuMiB)),
  agentVersion: 'bench',
});
const BIG = inventory(8, 80 * 1024, 64);
const SMALL = inventory(4, 40 * 1024, 32);

function fleet(): QueueMachine[] {
  const random = generator(1);
  return Array.from({ length: MACHINES }, (_, i) => {
    const inv = random(10) < 7 ? BIG : SMALL;
    const gpus = inv.gpus.length;
    const busy = random(10) < 6 ? gpus - random(3) : random(gpus + 1);
    const odd = random(50);
    return {
      id: `mch_${String(i).padStart(6, '0')}`,
      // One pool: every workspace's runs may use every machine (docs/runs.md, "Sharing machines").
      workspaceId: 'ws_fleet',
      shared: true,
      labels: { zone: ['a', 'b', 'c'][random(3)]!, ...(random(5) === 0 ? { ib: 'yes' } : {}) },
      liveness: odd === 0 ? ('stale' as const) : ('ready' as const),
      cordoned: odd === 1,
      draining: false,
      inventory: inv,
      warmModels: [],
      cachedVersions: [],
      load: 0,
      reserved: { gpus: busy, memoryMiB: busy * 20 * 1024, assignments: busy, cores: busy * 6 },
      deploymentIds: new Set<string>(),
      replicaFailures: new Map<string, string>(),
    };
  });
}

function workspaces(): QueueWorkspace[] {
  const random = generator(2);
  return Array.from({ length: WORKSPACES }, (_, i) => ({
    id: `ws_${i}`,
    weight: 1 + random(3),
    priorityCeiling: random(4),
    quota: random(3) === 0 ? { gpus: 64 + random(512) } : {},
    usage: { gpus: random(64), memoryMiB: 0, replicas: 0 },
    gpuSeconds: random(10_000_000),
  }));
}

const SIZES = [1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 4, 4, 4, 8, 8, 8, 16, 16, 32, 64, 128];

/** `distinct`: each run's memory differs by a MiB, so that no two runs share a demand and none is refused from memory. */
function runs(distinct: boolean): QueuedRun[] {
  const random = generator(3);
  return Array.from({ length: RUNS }, (_, i) => {
    const gpus = SIZES[random(SIZES.length)]!;
    const perWorker = gpus >= 8 && random(2) === 0 ? 8 : 1;
    const memoryMiB = 16 * 1024 * perWorker + (distinct ? i : 0);
    const need = { gpus: perWorker, cores: 4 * perWorker, memoryMiB, gpuMemoryMiB: random(20) === 0 ? 80 * 1024 : 0 };
    const workers = gpus / perWorker;
    const groups: GroupDemand[] =
      random(10) === 0 && workers > 1
        ? [
            { name: 'trainer', workers: workers - 1, need },
            { name: 'eval', workers: 1, need: { gpus: 1, cores: 4, memoryMiB: 16 * 1024, gpuMemoryMiB: 0 } },
          ]
        : [{ name: null, workers, need }];
    const waited = random(20) === 0 ? 3 * HOUR : random(HOUR);
    return {
      id: `run_${String(i).padStart(6, '0')}`,
      workspaceId: `ws_${random(WORKSPACES)}`,
      priority: random(4),
      submittedAt: NOW - waited,
      waitingSince: NOW - waited,
      notBefore: null,
      groups,
      selector: { ...(random(5) === 0 ? { zone: ['a', 'b', 'c'][random(3)]! } : {}), ...(random(10) === 0 ? { ib: 'yes' } : {}) },
    };
  });
}

const tracked: Tracked[] = [{ name: 'bench', pids: () => [process.pid] }];

/** One pass over a fresh copy of the fleet: the time of each decision, the round's wall and CPU time. */
function round(distinct: boolean) {
  const input: QueueInput = { now: NOW, runs: runs(distinct), workspaces: workspaces(), machines: fleet(), agingMs: 2 * HOUR };
  const times = new Float64Array(RUNS);
  let admitted = 0;
  const held = new Set<string>();
  const cpuBefore = snapshot(tracked);
  const started = performance.now();
  const pass = openPass(input);
  const order = orderQueue(input);
  for (let i = 0; i < order.length; i++) {
    const t0 = performance.now();
    const decision = pass.decide(order[i]!);
    times[i] = performance.now() - t0;
    if (decision.admitted) admitted += 1;
    else for (const machine of decision.holds) held.add(machine);
  }
  const wallMs = performance.now() - started;
  const cpuMs = cpuSince(cpuBefore, tracked).bench!;
  return { times, admitted, held: held.size, wallMs, cpuMs };
}

const quantile = (sorted: Float64Array, q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
const round3 = (v: number) => Math.round(v * 1000) / 1000;

const rounds = [false, true].flatMap((distinct) => {
  round(distinct);
  return Array.from({ length: ROUNDS }, () => measure(distinct));
});

function measure(distinct: boolean) {
  const r = round(distinct);
  const sorted = Float64Array.from(r.times).sort();
  return {
    demands: distinct ? 'all distinct' : 'repeating',
    admitted: r.admitted,
    waiting: RUNS - r.admitted,
    heldMachines: r.held,
    decisionsPerSecond: Math.round(RUNS / (r.wallMs / 1000)),
    p50Ms: round3(quantile(sorted, 0.5)),
    p99Ms: round3(quantile(sorted, 0.99)),
    maxMs: round3(sorted[sorted.length - 1]!),
    cpuUsPerDecision: Math.round((r.cpuMs * 1000) / RUNS),
    loadAverage: loadAverage(),
  };
}
console.log(
  [
    `## Queue: ${RUNS} waiting runs on ${MACHINES} machines, one admission pass per round (target >= 2,000 decisions/s, p99 <= 10 ms)`,
    '',
    '| demands | admitted | waiting | held machines | decisions/s | p50 ms | p99 ms | max ms | CPU µs/decision | load avg |',
    '|---|---|---|---|---|---|---|---|---|---|',
    ...rounds.map(
      (r) =>
        `| ${r.demands} | ${r.admitted} | ${r.waiting} | ${r.heldMachines} | ${r.decisionsPerSecond} | ${r.p50Ms} | ${r.p99Ms} | ${r.maxMs} | ${r.cpuUsPerDecision} | ${r.loadAverage} |`,
    ),
  ].join('\n'),
);
await mkdir('bench/results', { recursive: true });
await writeFile(
  'bench/results/queue.json',
  `${JSON.stringify({ measuredAt: new Date().toISOString(), command: 'npm run bench:queue', machines: MACHINES, runs: RUNS, rounds }, null, 2)}\n`,
);
