import { mkdir, writeFile } from 'node:fs/promises';
import { loadAverage } from './proc-cpu.js';
import { placeReplica, type CandidateMachine, type PlacementRequest } from '../../functions/core/scheduler/place.js';
import type { GpuDevice, Inventory } from '../../shared/contracts/inventory.js';

/**
 * `npm run bench:scheduler`: the pure placement core (`functions/core/scheduler/place.ts`) deciding where every replica
 * of a large fleet goes, one decision after another as the controller makes them, each decision reserving on the
 * machine it picked. BENCH_MACHINES (1,000) machines of 16 discrete GPUs with 40 GiB each, a third of them labelled
 * `zone=b`, some with a version cached; BENCH_REPLICAS (10,000) replicas of 1 GPU (of at least 40 GiB) and 20 GiB
 * in deployments of 100, each naming a registry version, every fifth deployment selecting `zone=b` (replicas that
 * reserve may share a machine; spreading puts them on distinct ones first). Decisions per second
 * over the whole run and the p50/p99/max of one decision, after an unmeasured warm-up pass of the same work.
 * Prints a markdown table and writes bench/results/scheduler.json.
 */
const MACHINES = Number(process.env.BENCH_MACHINES ?? 1_000);
const REPLICAS = Number(process.env.BENCH_REPLICAS ?? 10_000);
const PER_DEPLOYMENT = 100;
const GPUS_PER_MACHINE = 16;
const GPU_MIB = 40 * 1024;

const gpu = (index: number): GpuDevice => ({
  index,
  uuid: `GPU-${index}`,
  name: 'bench GPU',
  memoryTotalMiB: GPU_MIB,
  memoryUsedMiB: 0,
  unifiedMemory: false,
  driverVersion: null,
  utilizationPercent: null,
  temperatureC: null,
  powerDrawW: null,
});

const inventory: Inventory = {
  hostname: 'bench',
  os: 'linux',
  arch: 'arm64',
  cpus: 20,
  cpuModel: null,
  memoryTotalMiB: 128 * 1024,
  memoryAvailableMiB: null,
  diskFreeMiB: null,
  gpus: Array.from({ length: GPUS_PER_MACHINE }, (_, i) => gpu(i)),
  agentVersion: 'bench',
};

function fleet(): CandidateMachine[] {
  return Array.from({ length: MACHINES }, (_, i) => ({
    id: `mch_${String(i).padStart(6, '0')}`,
    labels: i % 3 === 0 ? { zone: 'b' } : { zone: 'a' },
    liveness: 'ready' as const,
    cordoned: false,
    draining: false,
    inventory,
    warmModels: i % 7 === 0 ? ['model-0'] : [],
    cachedVersions: i % 11 === 0 ? ['mv_1'] : [],
    load: i % 5,
    reserved: { gpus: 0, memoryMiB: 0, assignments: 0 },
    deploymentIds: new Set<string>(),
    replicaCounts: new Map<string, number>(),
    replicaFailures: new Map<string, string>(),
  }));
}

const requestOf = (replica: number): PlacementRequest => {
  const deployment = Math.floor(replica / PER_DEPLOYMENT);
  return {
    deploymentId: `dep_${deployment}`,
    model: `model-${deployment % 10}`,
    selector: deployment % 5 === 4 ? { zone: 'b' } : {},
    gpus: 1,
    gpuMemoryMiB: 40 * 1024,
    memoryMiB: 20 * 1024,
    versionId: `mv_${deployment % 10}`,
  };
};

/** Places every replica in order; the time of each decision, and how many found no machine. */
function run(): { times: Float64Array; unplaced: number; wallMs: number } {
  const machines = fleet();
  const byId = new Map(machines.map((m) => [m.id, m]));
  const times = new Float64Array(REPLICAS);
  let unplaced = 0;
  const started = performance.now();
  for (let i = 0; i < REPLICAS; i += 1) {
    const request = requestOf(i);
    const t0 = performance.now();
    const decision = placeReplica(machines, request);
    times[i] = performance.now() - t0;
    const picked = decision.machineId ? byId.get(decision.machineId) : undefined;
    if (!picked) {
      unplaced += 1;
      continue;
    }
    picked.reserved.gpus += request.gpus;
    picked.reserved.memoryMiB += request.memoryMiB;
    picked.reserved.assignments += 1;
    (picked.deploymentIds as Set<string>).add(request.deploymentId);
    const counts = picked.replicaCounts as Map<string, number>;
    counts.set(request.deploymentId, (counts.get(request.deploymentId) ?? 0) + 1);
  }
  return { times, unplaced, wallMs: performance.now() - started };
}

const quantile = (sorted: Float64Array, q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
const round3 = (v: number) => Math.round(v * 1000) / 1000;

run();
const { times, unplaced, wallMs } = run();
const sorted = Float64Array.from(times).sort();
const result = {
  measuredAt: new Date().toISOString(),
  machines: MACHINES,
  replicas: REPLICAS,
  unplaced,
  decisionsPerSecond: Math.round(REPLICAS / (wallMs / 1000)),
  p50Ms: round3(quantile(sorted, 0.5)),
  p99Ms: round3(quantile(sorted, 0.99)),
  maxMs: round3(sorted[sorted.length - 1]!),
  loadAverage: loadAverage(),
};
console.log(
  [
    `## Scheduler: ${MACHINES} machines, ${REPLICAS} replicas placed one decision after another`,
    '',
    '| machines | replicas | unplaced | decisions/s | p50 ms | p99 ms | max ms | load avg |',
    '|---|---|---|---|---|---|---|---|',
    `| ${result.machines} | ${result.replicas} | ${result.unplaced} | ${result.decisionsPerSecond} | ${result.p50Ms} | ${result.p99Ms} | ${result.maxMs} | ${result.loadAverage} |`,
  ].join('\n'),
);
await mkdir('bench/results', { recursive: true });
await writeFile('bench/results/scheduler.json', `${JSON.stringify(result, null, 2)}\n`);
