import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { simulatedDeployment } from '../api.js';
import { firstSeen, watchMachines } from '../machine-watch.js';
import { percentile, roundMs, secondsSince, secondsUntil, sleep } from '../measure.js';
import { simNodes } from '../nodes.js';
import { controlPlane, privateDatabase } from '../planes.js';
import type { Metric, Scenario } from '../scenario.js';

const MODEL = 'skew-chat';
/** Debian's libfaketime (package faketime). */
const LIBFAKETIME = '/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1';
const SKEWS = { 'clock-ahead': '+600s', 'clock-behind': '-600s', 'clock-true': null } as const;
type NodeName = keyof typeof SKEWS;
/** A skewed agent may take a clock measurement longer than one with the right time, no more. */
const READY_LAG_TARGET_S = 15;

/** The environment that runs an agent with its wall clock `offset` off; its timers keep real time. */
const fakeClock = (offset: string): NodeJS.ProcessEnv => ({ LD_PRELOAD: LIBFAKETIME, FAKETIME: offset, FAKETIME_DONT_FAKE_MONOTONIC: '1' });

/** The agent's `clock skew` log lines (agent/link/clock.ts). */
async function skewWarnings(logFile: string): Promise<Array<{ offsetMs: number; warning: string }>> {
  return (await readFile(logFile, 'utf8'))
    .split('\n')
    .filter((line) => line.includes('"event":"clock skew"'))
    .map((line) => JSON.parse(line) as { offsetMs: number; warning: string });
}

/**
 * Agents whose clocks are 10 minutes ahead and behind (issue 11: one 6 s ahead was refused and stayed `pending`
 * for ever, and its log never mentioned the clock), beside one with the right time: each enrolls, becomes ready,
 * serves, and logs its offset.
 */
export const clockSkew: Scenario = {
  name: 'clock-skew',
  title: 'agents with their clocks 10 min ahead and 10 min behind (faketime) enroll, become ready and serve',
  expectedS: 60,
  async run(ctx) {
    if (!existsSync(LIBFAKETIME)) throw new Error(`${LIBFAKETIME} is missing: apt-get install faketime`);
    const probe = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(Date.now()))'], {
      env: { ...process.env, ...fakeClock('+600s') },
      encoding: 'utf8',
    });
    if (Math.abs(Number(probe.stdout) - Date.now() - 600_000) > 10_000)
      throw new Error(`libfaketime does not move Node's clock here (a child read ${probe.stdout || probe.stderr})`);

    const cluster = await privateDatabase(ctx.scope);
    const plane = await controlPlane(ctx.scope, { name: 'a', databaseUrl: cluster.url, dir: ctx.dir });
    const api = plane.api;
    const names = Object.keys(SKEWS) as NodeName[];
    await api.putDeployment(MODEL, simulatedDeployment(MODEL, names.length));
    const watch = watchMachines(api, 250);
    const startedAt = performance.now();
    ctx.log('enrolling and starting agents at +600 s, -600 s and the right time');
    const nodes = await simNodes(ctx.scope, {
      url: plane.url,
      databaseUrl: cluster.url,
      names,
      dir: ctx.dir,
      env: (name) => (SKEWS[name as NodeName] ? fakeClock(SKEWS[name as NodeName]!) : undefined),
    });
    const enrolledS = secondsSince(startedAt);
    const allServingS = await secondsUntil(
      async () => (await api.machines()).filter((m) => m.state === 'ready' && m.runtimes.some((r) => r.routable)).length === names.length,
      {
        timeoutMs: 120_000,
        fromMs: startedAt,
      },
    );
    // One more poll after the check that saw all three, so that the watch has seen each of them too.
    await sleep(1_000);
    const polls = await watch.stop();
    const answers: number[] = [];
    const latencies: number[] = [];
    for (let i = 0; i < 9; i++) {
      const sent = performance.now();
      const response = await api.chat(MODEL).catch(() => null);
      await response?.text();
      answers.push(response?.status ?? 0);
      if (response?.status === 200) latencies.push(performance.now() - sent);
    }

    const missed: string[] = [];
    const metrics: Record<string, Metric> = { 'enrollment of all three (s)': enrolledS, 'start -> all three ready and serving (s)': allServingS };
    const readyAfter = (name: NodeName) => {
      const seen = firstSeen(polls, startedAt, name, (m) => m.state === 'ready' && m.routable);
      return seen ? secondsSince(startedAt, seen.at) : null;
    };
    const reference = readyAfter('clock-true');
    for (const node of nodes) {
      const name = node.name as NodeName;
      const readyS = readyAfter(name);
      const log = await readFile(node.logFile, 'utf8');
      const warnings = await skewWarnings(node.logFile);
      const refusals = (log.match(/"code":"clock_skew"/g) ?? []).length;
      metrics[`${name}: start -> ready and serving (s)`] = readyS;
      metrics[`${name}: clock warnings logged`] = warnings.length
        ? `${warnings.length}, offset ${(warnings[0]!.offsetMs / 1000).toFixed(1)} s: "${warnings[0]!.warning}"`
        : 0;
      metrics[`${name}: requests refused for clock skew`] = refusals;
      if (readyS === null) missed.push(`${name} not ready and serving within 120 s`);
      else if (reference !== null && readyS - reference > READY_LAG_TARGET_S)
        missed.push(`${name} ready ${readyS - reference} s after the agent with the right time, target ${READY_LAG_TARGET_S} s`);
      if (SKEWS[name] && !warnings.some((w) => Math.abs(Math.abs(w.offsetMs) - 600_000) < 5_000)) missed.push(`${name}'s log does not name its 600 s offset`);
      if (!SKEWS[name] && warnings.length) missed.push(`${name} (right time) logged a clock warning`);
      if (refusals) missed.push(`${name} was refused ${refusals} times for clock skew`);
    }
    metrics['inference on the three: answers'] = answers.join(', ');
    if (answers.some((s) => s !== 200)) missed.push(`inference answered ${answers.filter((s) => s !== 200).join(', ')}`);
    return {
      setup: '1 control plane (private PostgreSQL, default timings), 3 agents: faketime +600 s, -600 s, none; 3 replicas',
      detectS: null,
      healS: allServingS,
      requests: {
        sent: answers.length,
        failed: answers.filter((s) => s !== 200).length,
        p50Ms: roundMs(percentile(latencies, 50)),
        p99Ms: roundMs(percentile(latencies, 99)),
        maxMs: roundMs(latencies.length ? Math.max(...latencies) : null),
      },
      lost: 'nothing',
      restartNeeded: nodes.some((n) => n.process.exitCode !== null),
      missed,
      metrics,
    };
  },
};
