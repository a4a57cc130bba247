import { Agent } from 'undici';
import { enrollTestMachine } from '../../helpers/machine.js';
import { Api, simulatedDeployment } from '../api.js';
import { withEnroller } from '../enroller.js';
import { leaseReader } from '../leases.js';
import { NODE_NAMES, waitUntilServing } from '../fleet.js';
import { secondsUntil, sleep } from '../measure.js';
import { simNodes, simStats } from '../nodes.js';
import { balancer, controlPlane, privateDatabase } from '../planes.js';
import type { Scenario } from '../scenario.js';
import { runSyntheticAgent, SyntheticStats } from '../synthetic-agent.js';

const MODEL = 'crash-chat';
const STREAMS = 8;
/** 10 tokens a second: a 300-token generation runs 30 s, long past the kill. */
const TOKENS = 300;

/**
 * A control-plane instance SIGKILLed with streaming generations in flight (issue 11: the 8 in-flight generations
 * ran on for nobody, their records stayed `running`, their Idempotency-Keys answered 409 for ever, and the dead
 * instance's leases kept its machines attached for up to 45 s). Two instances on one PostgreSQL; the agents reach
 * them through a failover balancer (so they are on A until it dies), the clients reach A directly; a ghost machine
 * is attached to A alone and never comes back.
 */
export const cpSigkill: Scenario = {
  name: 'cp-sigkill',
  title: `control plane A SIGKILLed with ${STREAMS} streaming generations in flight; B and the nodes carry on`,
  expectedS: 90,
  async run(ctx) {
    const cluster = await privateDatabase(ctx.scope);
    const a = await controlPlane(ctx.scope, { name: 'a', databaseUrl: cluster.url, dir: ctx.dir });
    const b = await controlPlane(ctx.scope, { name: 'b', databaseUrl: cluster.url, dir: ctx.dir });
    const lb = await balancer(ctx.scope, [a, b], 'failover');
    await b.api.putDeployment(MODEL, simulatedDeployment(MODEL, NODE_NAMES.length, { tokensPerSecond: 10 }));
    const nodes = await simNodes(ctx.scope, { url: lb.url, databaseUrl: cluster.url, names: NODE_NAMES, dir: ctx.dir });
    const ghostMachine = await withEnroller({ databaseUrl: cluster.url, url: a.url }, (plane) => enrollTestMachine(plane, 'ghost', { site: 'nowhere' }));
    const dispatcher = new Agent();
    const ghost = runSyntheticAgent({ url: a.url, machine: ghostMachine, intervalMs: 20_000, dispatcher, stats: new SyntheticStats() });
    ctx.scope.defer('the ghost machine', async () => {
      ghost.stop();
      await dispatcher.close();
    });
    // The ghost is a machine like the others (ready, attached) that runs no replica.
    await waitUntilServing(b.api, MODEL, NODE_NAMES.length + 1, NODE_NAMES.length);

    const leases = await leaseReader(ctx.scope, cluster.url);
    const held = await leases.holders();
    const instanceOfA = held.get('ghost');
    if (!instanceOfA || NODE_NAMES.some((name) => held.get(name) !== instanceOfA)) throw new Error('the nodes are not all attached through A');

    const abortedBefore = (await Promise.all(nodes.map(simStats))).reduce((sum, s) => sum + s.aborted, 0);
    const streams = await Promise.all(
      Array.from({ length: STREAMS }, async (_, i) => {
        const key = `chaos-crash-${Date.now()}-${i}`;
        const response = await a.api.chat(MODEL, { stream: true, max_tokens: TOKENS }, { 'idempotency-key': key }, 120_000);
        if (response.status !== 200) throw new Error(`streaming request ${i} answered ${response.status}`);
        const reader = response.body!.getReader();
        await reader.read();
        // What the client got after the kill: its stream ends with an error (the holder died) or, wrongly, completes.
        const ended = (async () => {
          try {
            while (!(await reader.read()).done);
            return 'completed';
          } catch {
            return 'cut';
          }
        })();
        return { key, workloadId: response.headers.get('x-lunanexa-workload-id')!, ended };
      }),
    );
    const active = await secondsUntil(async () => (await Promise.all(nodes.map(simStats))).reduce((sum, s) => sum + s.active, 0) >= STREAMS, {
      timeoutMs: 15_000,
    });
    if (active === null) throw new Error(`${STREAMS} generations are not all running on the nodes`);

    ctx.log(`SIGKILL control plane A with ${STREAMS} generations in flight`);
    const killedAt = performance.now();
    a.process.kill('SIGKILL');

    const viewOf = async (name: string) => (await b.api.machines()).find((m) => m.name === name);
    const [ghostDetachedS, reattachedS, abortedS, holderLostS] = await Promise.all([
      secondsUntil(async () => (await viewOf('ghost'))?.streamAttached === false, { timeoutMs: 60_000, fromMs: killedAt }),
      secondsUntil(
        async () => {
          const now = await leases.holders();
          const machines = await b.api.machines();
          return NODE_NAMES.every(
            (name) => now.has(name) && now.get(name) !== instanceOfA && machines.find((m) => m.name === name)?.runtimes.some((r) => r.routable),
          );
        },
        { timeoutMs: 60_000, fromMs: killedAt },
      ),
      secondsUntil(
        async () => {
          const stats = await Promise.all(nodes.map(simStats));
          return stats.reduce((sum, s) => sum + s.active, 0) === 0 && stats.reduce((sum, s) => sum + s.aborted, 0) >= abortedBefore + STREAMS;
        },
        { timeoutMs: 60_000, fromMs: killedAt },
      ),
      secondsUntil(
        async () => (await Promise.all(streams.map((s) => b.api.workload(s.workloadId)))).every((w) => w.state === 'failed' && w.errorCode === 'holder_lost'),
        {
          timeoutMs: 60_000,
          fromMs: killedAt,
        },
      ),
    ]);
    ctx.log(`ghost detached ${ghostDetachedS} s, nodes reattached via B ${reattachedS} s, generations aborted ${abortedS} s, holder_lost ${holderLostS} s`);

    const workloads = await Promise.all(streams.map((s) => b.api.workload(s.workloadId)));
    // The client that sent the key retries it through B: a key is scoped to its token, so the retry goes with A's
    // (the planes share the store's one admin token).
    const client = new Api(b.url, a.api.token);
    const retry = await client.chat(MODEL, { max_tokens: 3 }, { 'idempotency-key': streams[0]!.key });
    const retryBody = await retry.text();
    const sameWorkload = retry.headers.get('x-lunanexa-workload-id') === streams[0]!.workloadId;
    const again = await client.chat(MODEL, { max_tokens: 3 }, { 'idempotency-key': streams[0]!.key });
    await again.text();
    const endings = await Promise.all(streams.map((s) => Promise.race([s.ended, sleep(5_000).then(() => 'still open')])));
    const finalStats = await Promise.all(nodes.map(simStats));
    const aborted = finalStats.reduce((sum, s) => sum + s.aborted, 0) - abortedBefore;

    const missed: string[] = [];
    if (ghostDetachedS === null || ghostDetachedS > 15)
      missed.push(`a machine attached only through A detached after ${ghostDetachedS ?? 'never (60 s)'} s, target 15 s`);
    if (abortedS === null) missed.push(`orphaned generations not all aborted on the nodes within 60 s (${aborted} of ${STREAMS})`);
    if (holderLostS === null)
      missed.push(`workloads not all recorded holder_lost within 60 s (${workloads.map((w) => `${w.state}/${w.errorCode}`).join(', ')})`);
    if (retry.status !== 200) missed.push(`retry with the same Idempotency-Key answered ${retry.status}: ${retryBody.slice(0, 120)}`);
    if (reattachedS === null) missed.push('the nodes were not all reattached and routable through B within 60 s');
    return {
      setup: `2 control planes on one private PostgreSQL (default timings, instance lease 6 s), agents through a failover balancer, ${STREAMS} clients streaming ${TOKENS} tokens at 10 tokens/s straight to A, a ghost machine attached to A only`,
      detectS: ghostDetachedS,
      healS: reattachedS,
      requests: { sent: STREAMS, failed: endings.filter((e) => e !== 'completed').length, p50Ms: null, p99Ms: null, maxMs: null },
      lost: `the ${STREAMS} streams held by A (cut with it: ${endings.filter((e) => e === 'cut').length}); their generations ${aborted >= STREAMS ? 'were aborted on the nodes' : `ran on: only ${aborted} aborted`}`,
      restartNeeded: nodes.some((n) => n.process.exitCode !== null) || !b.alive(),
      missed,
      metrics: {
        'kill -> ghost (attached only through A) detached (s)': ghostDetachedS,
        'kill -> 4 nodes reattached through B and routable (s)': reattachedS,
        'kill -> orphaned generations aborted on the nodes (s)': abortedS,
        'generations aborted on the nodes': `${aborted} of ${STREAMS}`,
        'kill -> all workloads failed/holder_lost (s)': holderLostS,
        'workloads afterwards': [...new Set(workloads.map((w) => `${w.state}/${w.errorCode}`))].join(', '),
        'client streams': endings.join(', '),
        'retry, same Idempotency-Key, on B': `${retry.status}${sameWorkload ? ' (same workload id)' : ''}`,
        'second retry of that key': again.status,
      },
    };
  },
};
