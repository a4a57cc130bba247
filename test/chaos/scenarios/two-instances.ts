import { Api, simulatedDeployment } from '../api.js';
import { NODE_NAMES, replicasServing, waitUntilServing } from '../fleet.js';
import { clientLoad, tally } from '../load.js';
import { countFailures, secondsSince, secondsUntil, sleep } from '../measure.js';
import { simNodes } from '../nodes.js';
import { leaseReader } from '../leases.js';
import { balancer, controlPlane, privateDatabase } from '../planes.js';
import { lastFailureAfter, startProbe } from '../probe.js';
import type { Scenario } from '../scenario.js';

const MODEL = 'pair-chat';
const AFTER_KILL_S = 30;
const ERROR_FREE_TARGET_S = 10;

/**
 * Two instances behind one round-robin balancer, for the agents and for the clients alike, as in production;
 * one is SIGKILLed under client load. Only what was in flight on it may fail, and briefly.
 */
export const twoInstances: Scenario = {
  name: 'two-instances',
  title: 'two control planes behind a round-robin balancer (agents and clients), one SIGKILLed under client load',
  expectedS: 90,
  async run(ctx) {
    const cluster = await privateDatabase(ctx.scope);
    const a = await controlPlane(ctx.scope, { name: 'a', databaseUrl: cluster.url, dir: ctx.dir });
    const b = await controlPlane(ctx.scope, { name: 'b', databaseUrl: cluster.url, dir: ctx.dir });
    const lb = await balancer(ctx.scope, [a, b], 'round-robin');
    const api = new Api(lb.url, a.api.token);
    await api.putDeployment(MODEL, simulatedDeployment(MODEL, NODE_NAMES.length));
    const nodes = await simNodes(ctx.scope, { url: lb.url, databaseUrl: cluster.url, names: NODE_NAMES, dir: ctx.dir });
    await waitUntilServing(api, MODEL, NODE_NAMES.length, NODE_NAMES.length);

    const leases = await leaseReader(ctx.scope, cluster.url);
    // The balancer deals connections, not agents, so the streams may all have landed on one instance: the one
    // that holds the most is killed (the planes started in order, and so did their instance leases).
    const [idA, idB] = await leases.instances();
    const held = [...(await leases.holders())];
    const streamsOf = (id: string | undefined) => held.filter(([, instance]) => instance === id).map(([name]) => name);
    const [victim, survivor, victimId] = streamsOf(idA).length >= streamsOf(idB).length ? [a, b, idA] : [b, a, idB];
    const orphaned = streamsOf(victimId);
    const load = clientLoad(api, MODEL, { workers: 4, pauseMs: 50 });
    const probe = startProbe(api, MODEL, { workers: 2, pauseMs: 50, timeoutMs: 30_000 });
    await sleep(5_000);
    ctx.log(`SIGKILL control plane ${victim.name}, which holds the streams of ${orphaned.join(', ') || 'no node'}`);
    const killedAt = performance.now();
    victim.process.kill('SIGKILL');
    const reattachedS = await secondsUntil(
      async () => {
        const now = await leases.holders();
        return NODE_NAMES.every((name) => now.has(name) && now.get(name) !== victimId) && (await replicasServing(survivor.api, MODEL, NODE_NAMES.length));
      },
      { timeoutMs: 60_000, fromMs: killedAt, intervalMs: 250 },
    );
    await sleep(Math.max(0, AFTER_KILL_S * 1_000 - (performance.now() - killedAt)));
    const report = await load.stop();
    const samples = await probe.stop();
    const lastFailure = lastFailureAfter(samples, killedAt);
    const errorFreeS = lastFailure === null ? 0 : secondsSince(killedAt, lastFailure);
    const failedBefore = samples.filter((s) => s.at + s.ms < killedAt && s.status !== 200).length;

    const missed: string[] = [];
    if (errorFreeS > ERROR_FREE_TARGET_S) missed.push(`errors until ${errorFreeS} s after the kill, target ${ERROR_FREE_TARGET_S} s`);
    if (reattachedS === null) missed.push(`the nodes not all reattached through ${survivor.name} and serving within 60 s`);
    if (failedBefore) missed.push(`${failedBefore} probe requests failed before the kill`);
    return {
      setup: `2 control planes on one private PostgreSQL (default timings), a round-robin TCP balancer for 4 agents and the clients, 4 replicas, 4 client loops and 2 probes through it; ${victim.name} (holding ${orphaned.length} of the 4 streams) SIGKILLed, watched ${AFTER_KILL_S} s`,
      detectS: reattachedS,
      healS: errorFreeS,
      requests: tally(report),
      lost: report.failures.length ? `${report.failures.length} requests (${countFailures(report.failures.map((f) => f.status))})` : 'nothing',
      restartNeeded: !survivor.alive() || nodes.some((n) => n.process.exitCode !== null),
      missed,
      metrics: {
        'nodes attached through the killed instance': orphaned.join(', ') || 'none',
        'kill -> every node attached through the survivor, 4 replicas serving (s)': reattachedS,
        'kill -> last failed request ended (error-free after) (s)': errorFreeS,
        'client load failures by status': countFailures(report.failures.map((f) => f.status)),
        'probe requests / failed': `${samples.length} / ${samples.filter((s) => s.status !== 200).length} (${countFailures(samples.map((s) => s.status))})`,
        'first failure reasons': [...new Set([...report.failures.map((f) => `${f.status} ${f.body.slice(0, 80)}`)])].slice(0, 3).join(' / ') || '-',
      },
    };
  },
};
