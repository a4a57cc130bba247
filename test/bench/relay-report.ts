import { percentile, type Sample } from './relay-load.js';

/** One path at one concurrency of one profile: a round, or all its rounds together. */
export interface Row {
  profile: string;
  path: string;
  /** How tables name the path. */
  label: string;
  /** The process group of the runtime this path reaches. */
  runtime: string;
  concurrency: number;
  round: number | null;
  requests: number;
  errors: number;
  ttftP50Ms: number;
  ttftP99Ms: number;
  itlP50Ms: number;
  itlP99Ms: number;
  tokensPerSecond: number;
  /** CPU ms per request of each tracked process group over the round(s), whether on this path or not. */
  cpuMsPerRequest: Record<string, number>;
  /** The same CPU time as a share of one core over the round's wall time. */
  cpuPercentOfCore: Record<string, number>;
  /** The groups this path adds between client and runtime, and their CPU ms per request together. */
  onPath: string[];
  pathCpuMsPerRequest: number;
  /** The 1-minute load average after each round. */
  loadAverage1m: number[];
}

export function toRow(
  key: Omit<
    Row,
    | 'requests'
    | 'errors'
    | 'ttftP50Ms'
    | 'ttftP99Ms'
    | 'itlP50Ms'
    | 'itlP99Ms'
    | 'tokensPerSecond'
    | 'cpuMsPerRequest'
    | 'cpuPercentOfCore'
    | 'pathCpuMsPerRequest'
  >,
  s: Sample,
  cpuMs: Record<string, number>,
): Row {
  const perRequest = (ms: number) => ms / Math.max(1, s.requests);
  const cpuMsPerRequest = Object.fromEntries(Object.entries(cpuMs).map(([name, ms]) => [name, perRequest(ms)]));
  return {
    ...key,
    requests: s.requests,
    errors: s.errors,
    ttftP50Ms: percentile(s.ttft, 50),
    ttftP99Ms: percentile(s.ttft, 99),
    itlP50Ms: percentile(s.itl, 50),
    itlP99Ms: percentile(s.itl, 99),
    tokensPerSecond: s.tokens / (s.wallMs / 1000),
    cpuMsPerRequest,
    cpuPercentOfCore: Object.fromEntries(Object.entries(cpuMs).map(([name, ms]) => [name, (100 * ms) / s.wallMs])),
    pathCpuMsPerRequest: key.onPath.reduce((sum, name) => sum + (cpuMsPerRequest[name] ?? 0), 0),
  };
}

const num = (n: number, digits = n < 10 ? 2 : 0) => (Number.isFinite(n) ? n.toFixed(digits) : 'n/a');
const span = (low: number, high: number) => `${num(low)}${low < 0 ? ' to ' : '-'}${num(high)}`;
const range = (values: number[]) => (values.length === 0 ? 'n/a' : span(Math.min(...values), Math.max(...values)));
const perProcess = (r: Row, of: Record<string, number>, digits: number, unit = '') =>
  r.onPath.length === 0 ? '-' : r.onPath.map((name) => `${name} ${num(of[name] ?? NaN, digits)}${unit}`).join(', ');
const mark = (n: number) => {
  const text = num(n);
  if (!Number.isFinite(n)) return text;
  // A difference that rounds to zero reads +0.00, whichever side of it it fell.
  return text.startsWith('-') && Number(text) !== 0 ? text : `+${text.replace('-', '')}`;
};

/** The worst case: every per-request cost at full weight. */
export function worstTable(rows: Row[]): string[] {
  const lines = [
    '| path | c | requests | TTFT p50 ms | TTFT p99 ms | ITL p99 ms | tokens/s | errors | CPU ms/req on path | per process (ms/req) | runtime, client (ms/req) | load 1 min |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const r of rows) {
    const around = `${num(r.cpuMsPerRequest[r.runtime] ?? NaN, 3)}, ${num(r.cpuMsPerRequest.client ?? NaN, 3)}`;
    lines.push(
      `| ${r.label} | ${r.concurrency} | ${r.requests} | ${num(r.ttftP50Ms)} | ${num(r.ttftP99Ms)} | ${num(r.itlP99Ms)} | ${num(r.tokensPerSecond, 0)} | ${r.errors} | ${num(r.pathCpuMsPerRequest, 3)} | ${perProcess(r, r.cpuMsPerRequest, 3)} | ${around} | ${range(r.loadAverage1m)} |`,
    );
  }
  return lines;
}

/** The realistic profile: what a paced stream loses per token, and what holding many streams costs. */
export function realisticTable(rows: Row[]): string[] {
  const direct = rows.find((r) => r.path === 'direct');
  const lines = [
    '| path | c | requests | TTFT p50 ms | ITL p50 ms | ITL p99 ms | added ITL p50 / p99 ms vs direct | tokens/s | errors | CPU % of a core per process | CPU ms/req on path | load 1 min |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const r of rows) {
    const added = direct ? `${mark(r.itlP50Ms - direct.itlP50Ms)} / ${mark(r.itlP99Ms - direct.itlP99Ms)}` : 'n/a';
    lines.push(
      `| ${r.label} | ${r.concurrency} | ${r.requests} | ${num(r.ttftP50Ms)} | ${num(r.itlP50Ms)} | ${num(r.itlP99Ms)} | ${added} | ${num(r.tokensPerSecond, 0)} | ${r.errors} | ${perProcess(r, r.cpuPercentOfCore, 0, ' %')} | ${num(r.pathCpuMsPerRequest, 3)} | ${range(r.loadAverage1m)} |`,
    );
  }
  return lines;
}

/** Every round on its own, in the order run: the load average beside each round's figures. */
export function roundsTable(rounds: Row[]): string[] {
  const lines = [
    '| profile | c | round | path | tokens/s | TTFT p50 ms | ITL p99 ms | errors | CPU ms/req on path | load 1 min |',
    '|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const r of rounds) {
    lines.push(
      `| ${r.profile} | ${r.concurrency} | ${r.round} | ${r.label} | ${num(r.tokensPerSecond, 0)} | ${num(r.ttftP50Ms)} | ${num(r.itlP99Ms)} | ${r.errors} | ${num(r.pathCpuMsPerRequest, 3)} | ${num(r.loadAverage1m[0]!)} |`,
    );
  }
  return lines;
}

export interface Baseline {
  measure: string;
  /** Over all rounds together. */
  value: number | null;
  /** The lowest and highest single round. */
  rounds: [number, number] | null;
  unit: string;
  target: string;
}

/** A LunaNexa setup's paths on one instance and on two, the end of its process groups' names and of its measures'. */
export interface Variant {
  one: string;
  two: string;
  tag: string;
  label: string;
}

/** The measures of issue 12's targets table, from this run: those of LunaNexa once per setup (before and after). */
export function baseline(rows: Row[], rounds: Row[], variants: Variant[]): Baseline[] {
  // Each measure is read off the direct row of a round (or of all rounds together) and the rows of the other
  // paths beside it: a ratio or a difference within one round, where the machine's load was the same.
  const measure = (name: string, unit: string, target: string, profile: string, c: number | undefined, of: (direct: Row) => number | null): Baseline => {
    const values = (list: Row[]) =>
      list
        .filter((r) => r.profile === profile && r.path === 'direct' && (c === undefined || r.concurrency === c))
        .map(of)
        .filter((v): v is number => v !== null && Number.isFinite(v));
    const each = values(rounds);
    return { measure: name, value: values(rows)[0] ?? null, rounds: each.length ? [Math.min(...each), Math.max(...each)] : null, unit, target };
  };
  const other = (reference: Row, path: string) =>
    (reference.round === null ? rows : rounds).find(
      (r) => r.profile === reference.profile && r.concurrency === reference.concurrency && r.round === reference.round && r.path === path,
    );
  const cpu = (path: string, only?: string[]) => (d: Row) => {
    const row = other(d, path);
    return !row ? null : only ? only.reduce((sum, name) => sum + (row.cpuMsPerRequest[name] ?? 0), 0) : row.pathCpuMsPerRequest;
  };
  const each = (of: (v: Variant) => Baseline) => variants.map(of);
  return [
    ...each((v) => measure(`CPU per request, control plane + agent, c=64${v.label}`, 'ms', '<= 0.7 ms', 'worst', 64, cpu(v.one))),
    measure('CPU per request, sshd + ssh, c=64 (reference)', 'ms', '', 'worst', 64, cpu('ssh')),
    measure('CPU per request, nginx, c=64 (reference)', 'ms', '', 'worst', 64, cpu('nginx')),
    ...each((v) =>
      measure(`tokens/s vs ssh -R, c=64${v.label}`, '%', '>= 80 %', 'worst', 64, (d) =>
        ratio(other(d, v.one)?.tokensPerSecond, other(d, 'ssh')?.tokensPerSecond),
      ),
    ),
    ...each((v) =>
      measure(`tokens/s vs direct, c=64 (reference)${v.label}`, '%', '', 'worst', 64, (d) => ratio(other(d, v.one)?.tokensPerSecond, d.tokensPerSecond)),
    ),
    ...each((v) => measure(`added TTFT p50 vs direct, c=1${v.label}`, 'ms', '<= 1 ms', 'worst', 1, (d) => diff(other(d, v.one)?.ttftP50Ms, d.ttftP50Ms))),
    measure('added TTFT p50 vs direct, c=1, ssh -R (reference)', 'ms', '', 'worst', 1, (d) => diff(other(d, 'ssh')?.ttftP50Ms, d.ttftP50Ms)),
    ...each((v) =>
      measure(`realistic profile: added ITL p99${v.label}`, 'ms', '<= +8 ms', 'realistic', undefined, (d) => diff(other(d, v.one)?.itlP99Ms, d.itlP99Ms)),
    ),
    measure('realistic profile: added ITL p99, ssh -R (reference)', 'ms', '', 'realistic', undefined, (d) => diff(other(d, 'ssh')?.itlP99Ms, d.itlP99Ms)),
    ...each((v) =>
      measure(
        `realistic profile: control-plane CPU${v.label}`,
        '% of a core',
        '<= 25 %',
        'realistic',
        undefined,
        (d) => other(d, v.one)?.cpuPercentOfCore[`control plane${v.tag}`] ?? null,
      ),
    ),
    ...each((v) =>
      measure(
        `two instances: CPU per request, both planes + agent, c=64${v.label}`,
        'ms',
        '<= 1.5 ms',
        'worst',
        64,
        cpu(
          v.two,
          ['control plane A', 'control plane', 'agent'].map((g) => `${g}${v.tag}`),
        ),
      ),
    ),
    ...each((v) =>
      measure(`two instances: CPU per request, the same and the PostgreSQL backends, c=64 (reference)${v.label}`, 'ms', '', 'worst', 64, cpu(v.two)),
    ),
  ];
}
const ratio = (x: number | undefined, y: number | undefined) => (x === undefined || y === undefined ? null : (100 * x) / y);
const diff = (x: number | undefined, y: number | undefined) => (x === undefined || y === undefined ? null : x - y);

export function baselineTable(measures: Baseline[]): string[] {
  const lines = ['| measure | this run (all rounds) | single rounds | target |', '|---|---|---|---|'];
  for (const m of measures) {
    const unit = m.unit === 'ms' ? ' ms' : ` ${m.unit}`;
    lines.push(
      `| ${m.measure} | ${m.value === null ? 'n/a' : `${num(m.value)}${unit}`} | ${m.rounds ? `${span(m.rounds[0], m.rounds[1])}${unit}` : 'n/a'} | ${m.target} |`,
    );
  }
  return lines;
}
