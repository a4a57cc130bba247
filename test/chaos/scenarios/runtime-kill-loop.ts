import type { SimNode } from '../../../functions/hosts/dev/fleet.js';
import type { DeploymentStatus } from '../../../shared/contracts/deployment.js';
import { servingOn, type Api } from '../api.js';
import { startFleet } from '../fleet.js';
import { clientLoad, tally } from '../load.js';
import { countFailures, secondsSince, secondsUntil, sleep } from '../measure.js';
import { isSimRuntime, runtimeRecords } from '../nodes.js';
import type { Scenario } from '../scenario.js';

const MODEL = 'flaky-chat';
/** The deployment's restart policy: the schema's defaults (5 restarts, backoff from 1 s doubling). */
const MAX_RESTARTS = 5;

/**
 * Kills every simulated runtime `node` launches as soon as its record names it, once per process (a pid reused by
 * another process is never touched), remembering when.
 */
function killLoop(node: SimNode) {
  const kills: number[] = [];
  const killed = new Set<number>();
  let running = true;
  const loop = (async () => {
    while (running) {
      for (const record of await runtimeRecords(node)) {
        if (killed.has(record.pid) || !(await isSimRuntime(record.pid))) continue;
        killed.add(record.pid);
        process.kill(-record.pid, 'SIGKILL');
        kills.push(performance.now());
      }
      await sleep(25);
    }
  })();
  return {
    kills,
    async stop() {
      running = false;
      await loop;
      return kills;
    },
  };
}

/** Reads the deployment's status every 250 ms, keeping each answer with its time. */
function watchStatus(api: Api) {
  const seen: Array<{ at: number; status: DeploymentStatus }> = [];
  let running = true;
  const loop = (async () => {
    while (running) {
      const at = performance.now();
      const detail = await api.deployment(MODEL).catch(() => null);
      if (detail) seen.push({ at, status: detail.status });
      await sleep(250);
    }
  })();
  return {
    seen,
    async stop() {
      running = false;
      await loop;
      return seen;
    },
  };
}

/**
 * The runtime of one replica killed every time it starts, until it has used its restarts (issue 11: it stayed
 * `failed` for good, was not placed elsewhere, and its deployment did not say it was degraded). It must be
 * replaced on another machine and serve there, with the deployment degraded, and saying why, meanwhile.
 */
export const runtimeKillLoop: Scenario = {
  name: 'runtime-kill-loop',
  title: `the runtime of one of 2 replicas SIGKILLed at every start until past its ${MAX_RESTARTS} restarts`,
  expectedS: 90,
  async run(ctx) {
    const { plane, nodes } = await startFleet(ctx, { model: MODEL, replicas: 2 });
    const api = plane.api;
    const [victimName, otherName] = servingOn(await api.deployment(MODEL));
    const victim = nodes.find((n) => n.name === victimName)!;
    const load = clientLoad(api, MODEL, { workers: 2, pauseMs: 50 });
    const statuses = watchStatus(api);
    ctx.log(`killing the runtime on ${victim.name} at every start`);
    const startedAt = performance.now();
    const loop = killLoop(victim);
    const replacedS = await secondsUntil(
      async () => {
        const serving = servingOn(await api.deployment(MODEL));
        return serving.length === 2 && !serving.includes(victim.name);
      },
      { timeoutMs: 180_000, fromMs: startedAt, intervalMs: 250 },
    );
    const kills = await loop.stop();
    await sleep(2_000);
    const report = await load.stop();
    const seen = await statuses.stop();
    const replacedOn = servingOn(await api.deployment(MODEL)).find((name) => name !== otherName) ?? null;
    const marked = (await api.machines()).find((m) => m.name === victim.name)?.attention.length ?? 0;
    const degraded = seen.filter((s) => s.at >= startedAt && s.status.degraded);
    const unexplained = degraded.filter((s) => s.status.degradedReasons.length === 0).length;
    const reasons = [...new Set(degraded.flatMap((s) => s.status.degradedReasons))];
    const lastKill = kills.at(-1);
    const short = seen.filter((s) => s.at >= startedAt && s.status.ready < 2);
    const shortWithoutDegraded = short.filter((s) => !s.status.degraded).length;

    const missed: string[] = [];
    if (replacedS === null) missed.push('not replaced and serving on another machine within 180 s');
    if (!degraded.length) missed.push('the deployment never said degraded');
    if (unexplained) missed.push(`${unexplained} degraded statuses without a reason`);
    if (kills.length !== MAX_RESTARTS + 1)
      missed.push(`${kills.length} launches killed, expected ${MAX_RESTARTS + 1} (the first and ${MAX_RESTARTS} restarts)`);
    if (!marked) missed.push(`${victim.name} not marked for the operator`);
    if (report.failures.length) missed.push(`${report.failures.length} requests failed (${countFailures(report.failures.map((f) => f.status))})`);
    return {
      setup: `1 control plane (private PostgreSQL, default timings), 4 agents, 2 replicas (restart policy on-failure, ${MAX_RESTARTS} restarts, backoff 1 s doubling), 2 client loops`,
      detectS: degraded.length ? secondsSince(startedAt, degraded[0]!.at) : null,
      healS: replacedS,
      requests: tally(report),
      lost: report.failures.length ? `${report.failures.length} requests (in flight on a killed runtime)` : 'nothing',
      restartNeeded: replacedS === null,
      missed,
      metrics: {
        'launches killed': kills.length,
        'first kill -> last kill (restart limit used up) (s)': lastKill === undefined ? null : secondsSince(kills[0]!, lastKill),
        'last kill -> replica serving on another machine (s)':
          replacedS === null || lastKill === undefined ? null : secondsSince(lastKill, startedAt + replacedS * 1000),
        'first kill -> replaced and serving (s)': replacedS,
        'replaced on': replacedOn,
        'statuses read while short of replicas': short.length,
        '... of them not degraded': shortWithoutDegraded,
        'degraded reasons seen': reasons.join(' / ') || '-',
        [`${victim.name} marked for the operator (attention)`]: marked > 0,
      },
    };
  },
};
