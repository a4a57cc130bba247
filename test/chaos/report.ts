import type { Metric, ScenarioResult } from './scenario.js';

const cell = (value: Metric | undefined) => (value === null || value === undefined ? '-' : String(value).replace(/\|/g, '\\|').replace(/\n/g, ' '));

/** The summary table: one row per scenario, the columns every scenario reports. */
export function summaryTable(results: readonly ScenarioResult[]): string {
  const rows = results.map((r) =>
    [
      r.name,
      r.outcome === 'error' ? `error: ${r.error}` : r.outcome,
      r.detectS,
      r.healS,
      r.requests ? `${r.requests.sent} / ${r.requests.failed}` : null,
      r.requests?.p99Ms,
      r.lost,
      r.outcome === 'error' ? null : r.restartNeeded ? 'yes' : 'no',
      r.loadAvg[0],
    ]
      .map(cell)
      .join(' | '),
  );
  return [
    '| scenario | targets | detect (s) | heal (s) | requests sent / failed | p99 (ms) | lost | restart needed | load avg 1 min |',
    '|---|---|---|---|---|---|---|---|---|',
    ...rows.map((row) => `| ${row} |`),
  ].join('\n');
}

/** Each scenario's own figures, its setup, and the targets it missed. */
export function detailTables(results: readonly ScenarioResult[]): string {
  return results
    .map((r) =>
      [
        `### ${r.name}: ${r.title}`,
        '',
        r.setup ? `Setup: ${r.setup}. Took ${r.durationS} s; load average ${r.loadAvg.join(' / ')} (1 / 5 / 15 min) at the end.` : `Took ${r.durationS} s.`,
        '',
        r.missed.length ? `Missed: ${r.missed.join('; ')}.` : r.outcome === 'error' ? `Error: ${r.error}` : 'Every target met.',
        '',
        '| measurement | value |',
        '|---|---|',
        ...(r.requests
          ? [
              `| requests sent / failed, p50 / p99 / max (ms) | ${r.requests.sent} / ${r.requests.failed}, ${cell(r.requests.p50Ms)} / ${cell(r.requests.p99Ms)} / ${cell(r.requests.maxMs)} |`,
            ]
          : []),
        ...Object.entries(r.metrics).map(([name, value]) => `| ${cell(name)} | ${cell(value)} |`),
      ].join('\n'),
    )
    .join('\n\n');
}
