import { DeploymentDetail } from '../../shared/contracts/deployment.js';
import { startNpmStart, type NpmStart } from '../helpers/npm-start.js';
import { waitFor } from '../helpers/plane.js';
import { cpuSince, loadAverage, snapshot, withDescendants, type Tracked } from './proc-cpu.js';

/**
 * `npm run bench:autoscale` (docs/autoscaling.md, docs/benchmarks.md "Autoscaling"): on `npm start`'s fleet, a
 * stepped load (LOW clients, then 5 x LOW, then LOW again) against one deployment three ways: autoscaled between 1
 * and 4 replicas on TTFT p95, and fixed at 1 and at 4 replicas (the autoscaler's minimum and maximum). Each client
 * streams one chat completion after another; the simulated runtime has a GPU's capacity (4 sequences at once, its
 * tokens per second shared among them), so that TTFT grows with the queue. Prints per deployment: TTFT p95 over the
 * whole run and during the burst once the scale-out delay has passed, failed requests, replica-seconds (replicas
 * desired, starting ones included, integrated over the run), CPU per request of the whole fleet from /proc, and the
 * load average.
 */
const LOW = Number(process.env.BENCH_LOW_CLIENTS ?? 2);
const PHASES_S = { low: 20, burst: 40, after: 30 };
/** From the burst's start: the autoscaler's delay (scaleUpAfterMs) and a replica's start, then TTFT is judged. */
const SCALE_OUT_DELAY_S = 12;
const TARGET_TTFT_MS = 800;
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 1);

const runtime = {
  kind: 'simulated',
  model: 'bench-auto',
  ttftMs: 150,
  tokensPerSecond: 40,
  loadMs: 1_000,
  memoryMiB: 1024,
  failureRate: 0,
  maxSequences: 4,
  sharedTokensPerSecond: 160,
};
const autoscale = {
  minReplicas: 1,
  maxReplicas: 4,
  target: { metric: 'ttftP95Ms', value: TARGET_TTFT_MS },
  scaleUpAfterMs: 3_000,
  scaleDownAfterMs: 15_000,
};
const variants = [
  { name: 'autoscaled 1-4', replicas: 1, autoscale },
  { name: 'fixed 1', replicas: 1, autoscale: null },
  { name: 'fixed 4', replicas: 4, autoscale: null },
];

interface Result {
  name: string;
  requests: number;
  failed: number;
  ttftP95Ms: number;
  burstTtftP95Ms: number;
  replicaSeconds: number;
  maxReplicas: number;
  cpuMsPerRequest: number;
  load: number;
}

const p95 = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.ceil(sorted.length * 0.95) - 1)]! : Number.NaN;
};
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function run(fleet: NpmStart, variant: (typeof variants)[number]): Promise<Result> {
  const put = await fleet.admin('/api/v1/deployments/bench-auto', {
    method: 'PUT',
    body: JSON.stringify({
      model: 'bench-auto',
      runtime,
      replicas: variant.replicas,
      selector: { sim: 'true' },
      memoryMiB: 1024,
      maxConcurrency: 16,
      autoscale: variant.autoscale,
    }),
  });
  if (!put.ok) throw new Error(`PUT: ${put.status} ${await put.text()}`);
  const detail = async () => DeploymentDetail.parse(await (await fleet.admin('/api/v1/deployments/bench-auto')).json());
  await waitFor(async () => ((await detail()).status.ready === variant.replicas ? true : null), {
    timeoutMs: 60_000,
    what: `${variant.name}: replicas serving`,
  });

  const tracked: Tracked[] = [{ name: 'fleet', pids: () => withDescendants(fleet.pid) }];
  const cpuBefore = snapshot(tracked);
  const started = performance.now();
  const at = () => (performance.now() - started) / 1000;
  const ttfts: Array<{ t: number; ms: number }> = [];
  let failed = 0;
  let clients = 0;
  let wanted = LOW;
  const client = async () => {
    clients += 1;
    const me = clients;
    while (me <= wanted) {
      const sent = performance.now();
      try {
        const answer = await fetch(`${fleet.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${fleet.token}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'bench-auto', messages: [{ role: 'user', content: 'bench' }], max_tokens: 16, stream: true }),
        });
        if (!answer.ok || !answer.body) {
          failed += 1;
          await answer.arrayBuffer().catch(() => {});
          await sleep(200);
          continue;
        }
        const reader = answer.body.getReader();
        let first: number | null = null;
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          if (first === null && value.byteLength > 0) first = performance.now() - sent;
        }
        ttfts.push({ t: (sent - started) / 1000, ms: first ?? Number.NaN });
      } catch {
        failed += 1;
      }
    }
    clients -= 1;
  };
  let replicaSeconds = 0;
  let maxReplicas = 0;
  let watching = true;
  const watch = (async () => {
    let last = performance.now();
    while (watching) {
      const { status } = await detail();
      const now = performance.now();
      const replicas = status.replicas.filter((r) => r.desired).length;
      replicaSeconds += (replicas * (now - last)) / 1000;
      maxReplicas = Math.max(maxReplicas, replicas);
      last = now;
      await sleep(500);
    }
  })();

  const loops: Promise<void>[] = Array.from({ length: LOW }, client);
  await sleep(PHASES_S.low * 1000);
  wanted = 5 * LOW;
  loops.push(...Array.from({ length: 4 * LOW }, client));
  await sleep(PHASES_S.burst * 1000);
  wanted = LOW;
  await sleep(PHASES_S.after * 1000);
  wanted = 0;
  await Promise.all(loops);
  watching = false;
  await watch;
  const cpu = cpuSince(cpuBefore, tracked).fleet ?? 0;
  const burstFrom = PHASES_S.low + SCALE_OUT_DELAY_S;
  const burstTo = PHASES_S.low + PHASES_S.burst;
  const result: Result = {
    name: variant.name,
    requests: ttfts.length + failed,
    failed,
    ttftP95Ms: p95(ttfts.map((r) => r.ms)),
    burstTtftP95Ms: p95(ttfts.filter((r) => r.t >= burstFrom && r.t < burstTo).map((r) => r.ms)),
    replicaSeconds,
    maxReplicas,
    cpuMsPerRequest: cpu / Math.max(1, ttfts.length),
    load: loadAverage(),
  };
  process.stderr.write(`${variant.name}: ${JSON.stringify(result)} (${at().toFixed(0)} s)\n`);
  const gone = await fleet.admin('/api/v1/deployments/bench-auto', { method: 'DELETE' });
  if (!gone.ok) throw new Error(`DELETE: ${gone.status}`);
  await waitFor(
    async () => {
      const machines = (await (await fleet.admin('/api/v1/machines')).json()) as { data: Array<{ runtimes: Array<{ deploymentName: string }> }> };
      return machines.data.every((m) => m.runtimes.every((r) => r.deploymentName !== 'bench-auto')) ? true : null;
    },
    { timeoutMs: 60_000, what: 'the replicas gone' },
  );
  return result;
}

const fleet = await startNpmStart({ LUNANEXA_RECONCILE_INTERVAL_MS: '1000' });
const results: Result[] = [];
try {
  // Rounds alternate the order, so that neither variant always runs on a fresher machine.
  for (let round = 0; round < ROUNDS; round++) {
    for (const variant of round % 2 === 0 ? variants : [...variants].reverse()) results.push(await run(fleet, variant));
  }
} finally {
  await fleet.stop();
}

const ms = (n: number) => (Number.isFinite(n) ? `${Math.round(n)} ms` : '-');
console.log(
  `\nAutoscaling: ${LOW} clients, ${5 * LOW} for ${PHASES_S.burst} s, ${LOW} again (${PHASES_S.low}/${PHASES_S.burst}/${PHASES_S.after} s); TTFT target ${TARGET_TTFT_MS} ms; burst TTFT from ${SCALE_OUT_DELAY_S} s into the burst\n`,
);
console.log(
  '| deployment | requests | failed | TTFT p95 | TTFT p95, burst after scale-out | replica-seconds | most replicas | CPU per request (fleet) | load avg |',
);
console.log('|---|---|---|---|---|---|---|---|---|');
for (const r of results) {
  console.log(
    `| ${r.name} | ${r.requests} | ${r.failed} | ${ms(r.ttftP95Ms)} | ${ms(r.burstTtftP95Ms)} | ${r.replicaSeconds.toFixed(0)} | ${r.maxReplicas} | ${r.cpuMsPerRequest.toFixed(1)} ms | ${r.load.toFixed(2)} |`,
  );
}
const auto = results.filter((r) => r.name.startsWith('autoscaled'));
const fixedMax = results.filter((r) => r.name === 'fixed 4');
const mean = (rs: Result[], f: (r: Result) => number) => rs.reduce((s, r) => s + f(r), 0) / rs.length;
if (auto.length && fixedMax.length) {
  const saved = 1 - mean(auto, (r) => r.replicaSeconds) / mean(fixedMax, (r) => r.replicaSeconds);
  console.log(
    `\nautoscaled vs fixed 4: ${(saved * 100).toFixed(0)} % fewer replica-seconds; burst TTFT p95 ${ms(mean(auto, (r) => r.burstTtftP95Ms))} against the ${TARGET_TTFT_MS} ms target`,
  );
}
