import { ControlPlaneConfig } from '../../../functions/kernel/config.js';
import { startFleet } from '../fleet.js';
import { clientLoad, tally } from '../load.js';
import { everIn, firstSeen, statePath, watchMachines, type Poll } from '../machine-watch.js';
import { countFailures, secondsSince, secondsUntil, sleep } from '../measure.js';
import { onlyRuntime } from '../nodes.js';
import type { Scenario } from '../scenario.js';

const MODEL = 'frozen-chat';
/** The protocol's defaults (docs/design.md section 4), which this scenario keeps: stale and down are judged by them. */
const STALE_AFTER_HEARTBEAT_S = 35;
const DOWN_AFTER_HEARTBEAT_S = 60;
/** Polls every 500 ms on a loaded machine: a transition is seen this much after it is due. */
const SCHEDULE_TOLERANCE_S = 5;
const UNROUTABLE_TARGET_S = 15;

/** Seconds from the frozen machine's last heartbeat (as the control plane recorded it) to the poll that saw `poll`. */
function sinceHeartbeat(poll: Poll | null, lastHeartbeatAt: string | null): number | null {
  if (!poll || !lastHeartbeatAt) return null;
  return Math.round((performance.timeOrigin + poll.at - Date.parse(lastHeartbeatAt)) / 10) / 100;
}

/**
 * One of four agents frozen (SIGSTOP) under client load for `seconds`, with the protocol's default liveness
 * timings (issue 11: a frozen agent stayed routable until its heartbeat was 35 s old, and every request sent to
 * it waited 10 s). It must be unroutable within seconds (the stream ping), stale and down on the documented
 * schedule, and serve again with the same runtime (re-adopted, not relaunched) once thawed.
 */
export function sigstop(seconds: 30 | 90): Scenario {
  return {
    name: `sigstop-${seconds}`,
    title: `one of 4 agents SIGSTOPped for ${seconds} s under client load, default liveness timings`,
    expectedS: seconds + 60,
    async run(ctx) {
      const { plane, nodes } = await startFleet(ctx, { model: MODEL, replicas: 4 });
      const api = plane.api;
      const frozen = nodes[1]!;
      const pidBefore = (await onlyRuntime(frozen)).pid;
      const watch = watchMachines(api, 500);
      const load = clientLoad(api, MODEL, { workers: 4, pauseMs: 50 });
      ctx.log(`SIGSTOP ${frozen.name} (agent pid ${frozen.process.pid}) for ${seconds} s`);
      const stoppedAt = performance.now();
      frozen.process.kill('SIGSTOP');
      await sleep(seconds * 1_000);
      frozen.process.kill('SIGCONT');
      const thawedAt = performance.now();
      ctx.log(`SIGCONT ${frozen.name}`);
      const routableS = await secondsUntil(async () => (await api.machines()).find((m) => m.name === frozen.name)?.runtimes.some((r) => r.routable) ?? false, {
        timeoutMs: 90_000,
        fromMs: thawedAt,
      });
      await sleep(3_000);
      const report = await load.stop();
      const polls = await watch.stop();

      const during = polls.filter((p) => p.at >= stoppedAt && p.at < thawedAt);
      const lastHeartbeatAt = during.flatMap((p) => p.machines ?? []).find((m) => m.name === frozen.name)?.lastHeartbeatAt ?? null;
      const unroutable = firstSeen(polls, stoppedAt, frozen.name, (m) => !m.routable);
      const stale = firstSeen(during, stoppedAt, frozen.name, (m) => m.state === 'stale');
      const down = firstSeen(during, stoppedAt, frozen.name, (m) => m.state === 'down');
      const unroutableS = unroutable && unroutable.at < thawedAt ? secondsSince(stoppedAt, unroutable.at) : null;
      const staleAfterHeartbeat = sinceHeartbeat(stale, lastHeartbeatAt);
      const downAfterHeartbeat = sinceHeartbeat(down, lastHeartbeatAt);
      const pidAfter = (await onlyRuntime(frozen).catch(() => null))?.pid ?? null;
      const others = new Set(nodes.filter((n) => n !== frozen).map((n) => n.name));
      const othersLost = [...everIn(polls, stoppedAt, 'stale'), ...everIn(polls, stoppedAt, 'down')].filter((name) => others.has(name));
      // How long after the freeze its last heartbeat lay: stale and down are due that much earlier than 35 s and 60 s.
      const heartbeatAgeAtFreeze = lastHeartbeatAt ? Math.round((performance.timeOrigin + stoppedAt - Date.parse(lastHeartbeatAt)) / 10) / 100 : null;
      const dueStale = heartbeatAgeAtFreeze !== null && seconds > STALE_AFTER_HEARTBEAT_S - heartbeatAgeAtFreeze + SCHEDULE_TOLERANCE_S;
      const dueDown = heartbeatAgeAtFreeze !== null && seconds > DOWN_AFTER_HEARTBEAT_S - heartbeatAgeAtFreeze + SCHEDULE_TOLERANCE_S;

      const missed: string[] = [];
      if (unroutableS === null || unroutableS > UNROUTABLE_TARGET_S)
        missed.push(`unroutable after ${unroutableS ?? 'never while frozen'} s, target ${UNROUTABLE_TARGET_S} s`);
      if (report.failures.length) missed.push(`${report.failures.length} requests failed (${countFailures(report.failures.map((f) => f.status))})`);
      if (pidAfter !== pidBefore) missed.push(`runtime relaunched (pid ${pidBefore} -> ${pidAfter})`);
      if (routableS === null) missed.push('not routable within 90 s of SIGCONT');
      if (othersLost.length) missed.push(`other machines shown stale or down: ${othersLost.join(', ')}`);
      if (dueStale && (staleAfterHeartbeat === null || Math.abs(staleAfterHeartbeat - STALE_AFTER_HEARTBEAT_S) > SCHEDULE_TOLERANCE_S)) {
        missed.push(`stale ${staleAfterHeartbeat ?? 'never'} s after the last heartbeat, documented ${STALE_AFTER_HEARTBEAT_S} s`);
      }
      if (!dueStale && stale) missed.push(`stale ${staleAfterHeartbeat} s after the last heartbeat, before its ${STALE_AFTER_HEARTBEAT_S} s`);
      if (dueDown && (downAfterHeartbeat === null || Math.abs(downAfterHeartbeat - DOWN_AFTER_HEARTBEAT_S) > SCHEDULE_TOLERANCE_S)) {
        missed.push(`down ${downAfterHeartbeat ?? 'never'} s after the last heartbeat, documented ${DOWN_AFTER_HEARTBEAT_S} s`);
      }
      if (!dueDown && down) missed.push(`down ${downAfterHeartbeat} s after the last heartbeat, before its ${DOWN_AFTER_HEARTBEAT_S} s`);
      return {
        setup: `1 control plane (private PostgreSQL, default timings: heartbeat 20 s, grace 15 s, lifetime 60 s, ping 3 s / 8 s, ack ${ControlPlaneConfig.parse({}).invokeAckTimeoutMs / 1000} s), 4 agents, 4 replicas, 4 client loops; ${frozen.name} frozen ${seconds} s`,
        detectS: unroutableS,
        healS: routableS,
        requests: tally(report),
        lost:
          report.failures.length || pidAfter !== pidBefore
            ? [report.failures.length ? `${report.failures.length} requests` : '', pidAfter !== pidBefore ? 'the runtime (relaunched)' : '']
                .filter(Boolean)
                .join('; ')
            : 'nothing',
        restartNeeded: frozen.process.exitCode !== null || routableS === null,
        missed,
        metrics: {
          'freeze -> unroutable (s)': unroutableS,
          'last heartbeat before the freeze, age at the freeze (s)': heartbeatAgeAtFreeze,
          'liveness states seen': statePath(polls, stoppedAt, frozen.name),
          'last heartbeat -> stale seen (s)': staleAfterHeartbeat,
          'last heartbeat -> down seen (s)': downAfterHeartbeat,
          'SIGCONT -> routable (s)': routableS,
          'runtime pid before / after': `${pidBefore} / ${pidAfter}`,
          'other machines stayed ready': othersLost.length === 0,
        },
      };
    },
  };
}
