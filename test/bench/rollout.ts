import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { startControlPlane } from '../../functions/hosts/node.js';
import { startSimNode, stopSimNodes } from '../../functions/hosts/dev/fleet.js';
import type { DeploymentDetail } from '../../shared/contracts/deployment.js';
import type { MachineView } from '../../shared/contracts/machine.js';
import { startLoad } from '../helpers/load.js';
import { waitFor } from '../helpers/plane.js';

/**
 * Fleet operations under a steady request load, with the control plane's default timings (embedded store, four
 * real agent processes with simulated runtimes): re-apply, scale 4 -> 2 -> 4, a rolling update of all four
 * replicas, and a drain. For each: the time until the deployment (or machine) reports the operation complete,
 * and every request sent meanwhile (failed ones counted, p50/p99 latency). Prints a table and writes
 * bench/results/rollout.json.
 */
const WORKERS = Number(process.env.BENCH_WORKERS ?? 4);
const dataDir = await mkdtemp(join(tmpdir(), 'lnx-bench-rollout-'));
const started = await startControlPlane({ port: 0, dataDir, logger: pino({ level: 'silent' }) });
// The embedded store: its first start always writes the admin token.
const plane = { ...started, adminToken: started.adminToken! };
const nodes = await Promise.all(['dgx-1', 'dgx-2', 'dgx-3', 'dgx-4'].map((name) => startSimNode(plane, name, join(dataDir, 'nodes'))));
const admin = (path: string, init: RequestInit = {}) =>
  fetch(`${plane.url}${path}`, { ...init, headers: { authorization: `Bearer ${plane.adminToken}`, 'content-type': 'application/json' } });
const spec = (replicas: number, ttftMs = 20) => ({
  model: 'bench-chat',
  runtime: { kind: 'simulated', model: 'bench-chat', ttftMs, tokensPerSecond: 200, loadMs: 2_000, memoryMiB: 64 },
  replicas,
  selector: { sim: 'true' },
  memoryMiB: 64,
});
const put = async (body: unknown) => {
  const response = await admin('/api/v1/deployments/bench-chat', { method: 'PUT', body: JSON.stringify(body) });
  if (response.status !== 200) throw new Error(`PUT answered ${response.status}: ${await response.text()}`);
};
const detail = async () => (await (await admin('/api/v1/deployments/bench-chat')).json()) as DeploymentDetail;
const settled = (replicas: number) =>
  waitFor(
    async () => {
      const d = await detail();
      return d.status.rollout.state === 'complete' && d.status.ready === replicas && d.status.replicas.length === replicas;
    },
    { timeoutMs: 180_000, intervalMs: 50, what: `${replicas} ready replicas` },
  );
const percentile = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]! : 0;
};

interface Row {
  operation: string;
  completeS: number;
  sent: number;
  failed: number;
  p50Ms: number;
  p99Ms: number;
  load1: number;
}
const rows: Row[] = [];
/** Runs `operation` under the load and measures it until `done` resolves. */
async function measure(operation: string, act: () => Promise<void>, done: () => Promise<unknown>) {
  const load = startLoad({ url: plane.url, token: plane.adminToken, model: 'bench-chat', workers: WORKERS, pauseMs: 20 });
  await new Promise((r) => setTimeout(r, 1_000));
  const started = performance.now();
  await act();
  await done();
  const completeS = (performance.now() - started) / 1000;
  // A second more of load: the retired replicas drain and stop in that time.
  await new Promise((r) => setTimeout(r, 1_000));
  const report = await load.stop();
  for (const failure of report.failures.slice(0, 3)) process.stderr.write(`${operation}: ${failure.status} ${failure.body}\n`);
  rows.push({
    operation,
    completeS: Number(completeS.toFixed(2)),
    sent: report.sent,
    failed: report.failures.length,
    p50Ms: Number(percentile(report.latenciesMs, 50).toFixed(1)),
    p99Ms: Number(percentile(report.latenciesMs, 99).toFixed(1)),
    load1: Number(loadavg()[0]!.toFixed(2)),
  });
}

try {
  await put(spec(4));
  await settled(4);
  await measure(
    're-apply unchanged spec',
    () => put(spec(4)),
    () => settled(4),
  );
  await measure(
    'scale 4 -> 2',
    () => put(spec(2)),
    () => settled(2),
  );
  await measure(
    'scale 2 -> 4',
    () => put(spec(4)),
    () => settled(4),
  );
  await measure(
    'rolling update of 4 replicas (2 s load each)',
    () => put(spec(4, 25)),
    () => settled(4),
  );
  await put(spec(3, 25));
  await settled(3);
  const target = (await detail()).status.replicas[0]!.machineId;
  await measure(
    'drain one machine (3 replicas on 4 machines)',
    async () => {
      const response = await admin(`/api/v1/machines/${target}/drain`, { method: 'POST' });
      if (response.status !== 200) throw new Error(`drain answered ${response.status}`);
    },
    () =>
      waitFor(async () => ((await (await admin(`/api/v1/machines/${target}`)).json()) as MachineView).drained, {
        timeoutMs: 180_000,
        intervalMs: 50,
        what: 'drained',
      }),
  );
  console.log(`\n${WORKERS} client loops, one small chat request after another (20 ms pause), default control-plane timings\n`);
  console.log('| operation | complete after (s) | requests during | failed | p50 (ms) | p99 (ms) | load avg 1 min |');
  console.log('|---|---|---|---|---|---|---|');
  for (const r of rows) console.log(`| ${r.operation} | ${r.completeS} | ${r.sent} | ${r.failed} | ${r.p50Ms} | ${r.p99Ms} | ${r.load1} |`);
  await mkdir('bench/results', { recursive: true });
  await writeFile(
    'bench/results/rollout.json',
    `${JSON.stringify({ measuredAt: new Date().toISOString(), command: 'npm run bench:rollout', workers: WORKERS, rows }, null, 2)}\n`,
  );
} finally {
  await stopSimNodes(nodes);
  await plane.close();
  await rm(dataDir, { recursive: true, force: true });
}
