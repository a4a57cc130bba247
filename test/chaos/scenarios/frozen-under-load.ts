import { ControlPlaneConfig } from '../../../functions/kernel/config.js';
import { startFleet } from '../fleet.js';
import { clientLoad, tally } from '../load.js';
import { countFailures, secondsUntil, sleep } from '../measure.js';
import { simStats } from '../nodes.js';
import type { Scenario } from '../scenario.js';

const MODEL = 'busy-chat';
const FREEZE_S = 20;
/** The control plane's default ack timeout: a request sent to a frozen node moves on after it. */
const ACK_TIMEOUT_MS = ControlPlaneConfig.parse({}).invokeAckTimeoutMs;
/** The ack timeout was 10 s before issue 11; a request that took that long waited it out. */
const OLD_ACK_TIMEOUT_MS = 10_000;
const LONG_REQUESTS = 8;

/**
 * A node frozen (SIGSTOP) while many requests are in flight to it (issue 11: every one of them waited the full
 * 10 s ack timeout). They must move on to another replica after the short ack timeout, and none may fail.
 */
export const frozenUnderLoad: Scenario = {
  name: 'frozen-under-load',
  title: `one of 4 agents SIGSTOPped for ${FREEZE_S} s under 8 client loops; requests in flight to it`,
  expectedS: 75,
  async run(ctx) {
    const { plane, nodes } = await startFleet(ctx, { model: MODEL, replicas: 4, runtime: { tokensPerSecond: 50 } });
    const api = plane.api;
    const frozen = nodes[2]!;
    const load = clientLoad(api, MODEL, { workers: 8, pauseMs: 10 });
    await sleep(2_000);
    // Requests already running on the node when it freezes (acknowledged, generating): the short ones of the
    // load finish too fast to be caught there reliably, these take 2 s each and are spread over the replicas.
    const running = Array.from({ length: LONG_REQUESTS }, async () => {
      const sent = performance.now();
      const response = await api.chat(MODEL, { max_tokens: 100 }, {}, 120_000).catch(() => null);
      await response?.text();
      return { status: response?.status ?? 0, ms: performance.now() - sent };
    });
    await sleep(500);
    const before = await simStats(frozen);
    ctx.log(`SIGSTOP ${frozen.name} for ${FREEZE_S} s, with ${before.active} requests running on it`);
    const stoppedAt = performance.now();
    frozen.process.kill('SIGSTOP');
    const unroutableS = await secondsUntil(async () => !(await api.machines()).find((m) => m.name === frozen.name)?.runtimes.some((r) => r.routable), {
      timeoutMs: FREEZE_S * 1_000,
      fromMs: stoppedAt,
    });
    await sleep(Math.max(0, FREEZE_S * 1_000 - (performance.now() - stoppedAt)));
    frozen.process.kill('SIGCONT');
    const thawedAt = performance.now();
    const routableS = await secondsUntil(async () => (await api.machines()).find((m) => m.name === frozen.name)?.runtimes.some((r) => r.routable) ?? false, {
      timeoutMs: 60_000,
      fromMs: thawedAt,
    });
    // Taken as soon as it is routable again, before it is sent new work: what its runtime got meanwhile was sent before or during the freeze.
    const after = await simStats(frozen);
    await sleep(3_000);
    const report = await load.stop();
    const long = await Promise.all(running);
    // They started before the freeze: one that took the whole freeze waited for the thaw instead of moving on when
    // the node stopped answering its pings (its stream is closed then, and what it carried is retried elsewhere).
    const heldThrough = long.filter((r) => r.ms >= FREEZE_S * 1_000);
    const t = tally(report);
    const movedOn = report.latenciesMs.filter((ms) => ms >= ACK_TIMEOUT_MS);
    const waitedOld = report.latenciesMs.filter((ms) => ms >= OLD_ACK_TIMEOUT_MS).length;

    const missed: string[] = [];
    if (report.failures.length) missed.push(`${report.failures.length} requests failed (${countFailures(report.failures.map((f) => f.status))})`);
    if (waitedOld) missed.push(`${waitedOld} requests of the load took 10 s or more`);
    if (heldThrough.length)
      missed.push(
        `${heldThrough.length} requests running on the node when it froze were held until it thawed (${heldThrough.map((r) => (r.ms / 1000).toFixed(1)).join(', ')} s; frozen ${FREEZE_S} s)`,
      );
    if (long.some((r) => r.status !== 200)) missed.push(`requests running on the node when it froze answered ${long.map((r) => r.status).join(', ')}`);
    if (unroutableS === null) missed.push(`still routable after ${FREEZE_S} s frozen`);
    if (routableS === null) missed.push('not routable within 60 s of SIGCONT');
    return {
      setup: `1 control plane (private PostgreSQL, default timings: ping 3 s / 8 s, ack timeout ${ACK_TIMEOUT_MS / 1000} s), 4 agents, 4 replicas (50 tokens/s), 8 client loops of 4-token requests and ${LONG_REQUESTS} 100-token requests sent just before the freeze; ${frozen.name} frozen ${FREEZE_S} s`,
      detectS: unroutableS,
      healS: routableS,
      requests: t,
      lost:
        report.failures.length || long.some((r) => r.status !== 200)
          ? `${report.failures.length + long.filter((r) => r.status !== 200).length} requests`
          : 'nothing',
      restartNeeded: frozen.process.exitCode !== null || routableS === null,
      missed,
      metrics: {
        'freeze -> unroutable (s)': unroutableS,
        [`requests that took >= the ${ACK_TIMEOUT_MS / 1000} s ack timeout (in flight to the frozen node, moved on)`]: movedOn.length,
        'their latencies (s)': movedOn.map((ms) => (ms / 1000).toFixed(1)).join(', ') || '-',
        'max latency (ms)': t.maxMs,
        'requests >= 10 s': waitedOld,
        [`${LONG_REQUESTS} 2 s requests sent just before the freeze (${before.active} running on the frozen node): latencies (s)`]: long
          .map((r) => `${(r.ms / 1000).toFixed(1)}${r.status === 200 ? '' : ` (${r.status})`}`)
          .join(', '),
        'frozen node runtime, freeze -> routable again: requests started / aborted': `${after.requests - before.requests} / ${after.aborted - before.aborted}`,
        'SIGCONT -> routable (s)': routableS,
      },
    };
  },
};
