import { monitorEventLoopDelay } from 'node:perf_hooks';
import { Agent } from 'undici';
import { enrollTestMachine, type TestMachine } from '../../helpers/machine.js';
import { withEnroller } from '../enroller.js';
import { everIn, watchMachines } from '../machine-watch.js';
import { cpuPercent, percentile, processSample, roundMs, secondsSince, secondsUntil, sleep } from '../measure.js';
import { controlPlane, privateDatabase } from '../planes.js';
import type { Scenario } from '../scenario.js';
import { runSyntheticAgent, SyntheticStats } from '../synthetic-agent.js';

const AGENTS = 1_000;
const ENROLL_CONCURRENCY = 16;
/** A few minutes of the default 20 s keep-alive: every agent reports about `OBSERVE_S / 20` times. */
const OBSERVE_S = 150;
/** The protocol's default keep-alive, which the control plane also tells agents at enrollment. */
const INTERVAL_MS = 20_000;

/** Enrolls `count` machines through `POST /agent/v1/enroll`, `ENROLL_CONCURRENCY` at a time. */
async function enrollMany(databaseUrl: string, url: string, count: number): Promise<TestMachine[]> {
  return await withEnroller({ databaseUrl, url }, async (plane) => {
    const machines: TestMachine[] = [];
    let next = 0;
    await Promise.all(
      Array.from({ length: ENROLL_CONCURRENCY }, async () => {
        while (next < count) {
          const i = next++;
          machines.push(await enrollTestMachine(plane, `synthetic-${String(i).padStart(4, '0')}`, { fleet: 'synthetic' }));
        }
      }),
    );
    return machines;
  });
}

/**
 * A thousand agents started together against one control plane on PostgreSQL, with the protocol's default
 * timings (issue 11: up to 32 % of the first heartbeats timed out, and heartbeats came in bursts). What a held
 * stream costs the control plane, how long heartbeats take, and whether any machine is ever wrongly shown stale
 * or down while every agent is alive.
 */
export const agents1000: Scenario = {
  name: 'agents-1000',
  title: `${AGENTS} synthetic agents started together, default timings, watched ${OBSERVE_S} s`,
  expectedS: OBSERVE_S + 150,
  async run(ctx) {
    const cluster = await privateDatabase(ctx.scope);
    const plane = await controlPlane(ctx.scope, { name: 'a', databaseUrl: cluster.url, dir: ctx.dir });
    const api = plane.api;
    const pid = plane.process.pid!;
    ctx.log(`enrolling ${AGENTS} machines`);
    const enrollStarted = performance.now();
    const machines = await enrollMany(cluster.url, plane.url, AGENTS);
    const enrollS = secondsSince(enrollStarted);
    await sleep(5_000);
    const idle = await processSample(pid);

    ctx.log(`starting ${AGENTS} synthetic agents together`);
    const stats = new SyntheticStats();
    const dispatcher = new Agent({ connect: { timeout: 10_000 } });
    const startedAt = performance.now();
    const agents = machines.map((machine) => runSyntheticAgent({ url: plane.url, machine, intervalMs: INTERVAL_MS, dispatcher, stats }));
    ctx.scope.defer('the synthetic agents', async () => {
      for (const agent of agents) agent.stop();
      await dispatcher.destroy();
    });
    const readyS = await secondsUntil(async () => (await api.machines()).filter((m) => m.state === 'ready' && m.streamAttached).length === AGENTS, {
      timeoutMs: 120_000,
      fromMs: startedAt,
      intervalMs: 1_000,
    });
    ctx.log(`all ${AGENTS} ready and attached after ${readyS} s; watching for ${OBSERVE_S} s`);
    const attached = await processSample(pid);
    const harnessBefore = await processSample(process.pid);
    // The synthetic agents share this process, and the machine's two cores with the control plane: a starved
    // event loop here would show as heartbeat latency, so it is measured beside it.
    const loopDelay = monitorEventLoopDelay();
    loopDelay.enable();
    const watchFrom = performance.now();
    const startBurst = stats.heartbeatLatenciesMs.length;
    const watch = watchMachines(api, 5_000);
    await sleep(OBSERVE_S * 1_000);
    const polls = await watch.stop();
    loopDelay.disable();
    const steady = await processSample(pid);
    const harnessAfter = await processSample(process.pid);
    const streams = await api.metric('lunanexa_agent_streams_attached').catch(() => null);

    const falseStale = everIn(polls, watchFrom, 'stale').size;
    const falseDown = everIn(polls, watchFrom, 'down').size;
    const detached = new Set(polls.filter((p) => p.at >= watchFrom).flatMap((p) => (p.machines ?? []).filter((m) => !m.attached).map((m) => m.name))).size;
    const failedPolls = polls.filter((p) => p.machines === null).length;
    const latencies = stats.heartbeatLatenciesMs.slice(startBurst);
    const perStreamKiB = idle && steady ? Math.round(((steady.rssMiB - idle.rssMiB) * 1024) / AGENTS) : null;
    const reasons = [...stats.failureReasons].map(([reason, n]) => `${reason} x${n}`).join('; ') || 'none';

    const missed: string[] = [];
    if (readyS === null) missed.push(`not all ${AGENTS} ready and attached within 120 s`);
    if (stats.firstHeartbeatFailures) missed.push(`${stats.firstHeartbeatFailures} first heartbeats failed (${reasons})`);
    if (falseStale || falseDown) missed.push(`machines falsely shown stale: ${falseStale}, down: ${falseDown}`);
    if (stats.streamOpens > AGENTS) missed.push(`${stats.streamOpens - AGENTS} stream reconnects`);
    return {
      setup: `1 control plane (private PostgreSQL, default timings: heartbeat 20 s, ping 3 s), ${AGENTS} synthetic agents in one process (the agent's link code, no runtimes), started in the same instant; watched ${OBSERVE_S} s`,
      detectS: null,
      healS: readyS,
      requests: null,
      lost: stats.heartbeatFailures ? `${stats.heartbeatFailures} heartbeats failed (retried)` : 'nothing',
      restartNeeded: !plane.alive(),
      missed,
      metrics: {
        'enrollment of all, 16 at a time (s)': enrollS,
        'start -> all ready and attached (s)': readyS,
        'control plane RSS idle / all attached / after the watch (MiB)': `${idle?.rssMiB} / ${attached?.rssMiB} / ${steady?.rssMiB}`,
        'memory per held stream (KiB, RSS delta / streams)': perStreamKiB,
        'control plane CPU while watched (% of one core)': cpuPercent(attached, steady, OBSERVE_S),
        "synthetic agents' process while watched: CPU (% of one core), event-loop delay p99 (ms)": `${cpuPercent(harnessBefore, harnessAfter, OBSERVE_S)}, ${roundMs(loopDelay.percentile(99) / 1e6)}`,
        lunanexa_agent_streams_attached: streams,
        'heartbeats sent / failed (all)': `${stats.heartbeatLatenciesMs.length + stats.heartbeatFailures} / ${stats.heartbeatFailures}`,
        'heartbeat latency while watched, p50 / p99 / max (ms)': `${roundMs(percentile(latencies, 50))} / ${roundMs(percentile(latencies, 99))} / ${roundMs(latencies.length ? Math.max(...latencies) : null)}`,
        'first heartbeat latency p50 / p99 (ms)': `${roundMs(percentile(stats.firstHeartbeatLatenciesMs, 50))} / ${roundMs(percentile(stats.firstHeartbeatLatenciesMs, 99))}`,
        'first heartbeats failed': stats.firstHeartbeatFailures,
        'heartbeat failure reasons': reasons,
        'stream opens (1 per agent without reconnects)': stats.streamOpens,
        'stream pings received / answered on the uplink / by request / requests failed': `${stats.pings} / ${stats.uplinkPongs} / ${stats.pongs} / ${stats.pongFailures}`,
        'machines ever shown stale / down / detached while watched': `${falseStale} / ${falseDown} / ${detached}`,
        'machine list polls that failed': failedPolls,
      },
    };
  },
};
