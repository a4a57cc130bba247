import { mkdtemp, writeFile } from 'node:fs/promises';
import { cpus, tmpdir, totalmem } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { loadAverage } from './measure.js';
import { detailTables, summaryTable } from './report.js';
import { currentScope, runScenario, type Scenario, type ScenarioResult } from './scenario.js';
import { agents1000 } from './scenarios/agents-1000.js';
import { clockSkew } from './scenarios/clock-skew.js';
import { cpSigkill } from './scenarios/cp-sigkill.js';
import { dbOutage } from './scenarios/db-outage.js';
import { frozenUnderLoad } from './scenarios/frozen-under-load.js';
import { runtimeKillLoop } from './scenarios/runtime-kill-loop.js';
import { sigstop } from './scenarios/sigstop.js';
import { twoInstances } from './scenarios/two-instances.js';

/**
 * `npm run chaos [-- --only a,b] [--out file.json]`: each fault of issue 11 against real processes on this machine
 * (control planes, agents, simulated runtimes, private PostgreSQL clusters), one after another; prints a markdown
 * table of timings and outcomes on stdout, progress on stderr, and writes every figure as JSON.
 */
const SCENARIOS: Scenario[] = [dbOutage, cpSigkill, sigstop(30), sigstop(90), frozenUnderLoad, runtimeKillLoop, clockSkew, twoInstances, agents1000];

const { values } = parseArgs({ options: { only: { type: 'string' }, out: { type: 'string' }, list: { type: 'boolean' } } });
if (values.list) {
  for (const s of SCENARIOS) console.log(`${s.name.padEnd(20)} ~${s.expectedS} s  ${s.title}`);
  process.exit(0);
}
const only = values.only
  ?.split(',')
  .map((name) => name.trim())
  .filter(Boolean);
const unknown = only?.filter((name) => !SCENARIOS.some((s) => s.name === name)) ?? [];
if (unknown.length) {
  console.error(`unknown scenario ${unknown.join(', ')}; there are: ${SCENARIOS.map((s) => s.name).join(', ')}`);
  process.exit(2);
}
const selected = only ? SCENARIOS.filter((s) => only.includes(s.name)) : SCENARIOS;
const out = values.out ? resolve(values.out) : join(await mkdtemp(join(tmpdir(), 'lnx-chaos-results-')), 'chaos-results.json');
const logsDir = join(dirname(out), 'chaos-logs');

// An interrupted run still stops what the running scenario started: its processes and clusters outlive it otherwise.
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    process.stderr.write(`[chaos] ${signal}: cleaning up the running scenario\n`);
    void (currentScope()?.close() ?? Promise.resolve()).finally(() => process.exit(130));
  });
}

const command = `npm run chaos${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(' ')}` : ''}`;
const loadAtStart = loadAverage();
process.stderr.write(
  `[chaos] ${selected.length} scenarios, about ${Math.round(selected.reduce((s, x) => s + x.expectedS, 0) / 60)} min: ${selected.map((s) => s.name).join(', ')}\n`,
);
const results: ScenarioResult[] = [];
for (const scenario of selected) results.push(await runScenario(scenario, logsDir));

const measuredAt = new Date().toISOString();
const header = [
  `Measured ${measuredAt.replace('T', ' ').slice(0, 16)} UTC with \`${command}\` on ${cpus().length} cores, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.versions.node};`,
  `load average ${loadAtStart.join(' / ')} at the start, ${loadAverage().join(' / ')} at the end (1 / 5 / 15 min).`,
].join(' ');
console.log(`\n${header}\n\n${summaryTable(results)}\n\n${detailTables(results)}\n`);
await writeFile(
  out,
  `${JSON.stringify({ measuredAt, command, machine: { cpus: cpus().length, memoryGiB: Math.round(totalmem() / 2 ** 30), node: process.versions.node }, loadAvgStart: loadAtStart, loadAvgEnd: loadAverage(), results }, null, 2)}\n`,
);
process.stderr.write(
  `[chaos] results written to ${out}${results.some((r) => r.outcome !== 'met') ? `; logs of the scenarios that missed a target in ${logsDir}` : ''}\n`,
);
process.exit(results.every((r) => r.outcome === 'met') ? 0 : 1);
