import { html, type Html } from './html.js';
import { quantile } from './format.js';

/** One measurement: when (epoch ms) and its value. */
export interface ChartPoint {
  t: number;
  v: number;
}

const W = 600;
const H = 200;
const LEFT = 52;
const RIGHT = 14;
const TOP = 12;
const BOTTOM = 28;

/** The smallest 1, 2, 2.5 or 5 times a power of ten at or above `value`: a y-axis top that reads well. */
export function niceCeil(value: number): number {
  if (!(value > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 2.5, 5, 10]) if (step * power >= value) return step * power;
  return 10 * power;
}

function clock(t: number): string {
  return new Date(t).toISOString().slice(11, 19);
}

const round1 = (n: number) => Math.round(n * 10) / 10;

/**
 * A line chart of `points` over time as inline SVG, drawn on the server: no script, no style attribute (the CSP
 * allows neither inline), colours from the stylesheet's classes. Labelled for screen readers with its title and a
 * summary (count, median, 95th percentile, maximum); with no point it says so instead of drawing an empty axis.
 */
export function lineChart(input: {
  id: string;
  title: string;
  points: readonly ChartPoint[];
  series: 's1' | 's2';
  format: (value: number) => string;
  empty: string;
  /** What a point is, in the summary read to screen readers (`requests` unless said). */
  noun?: string;
}): Html {
  const { id, points, format } = input;
  const values = points.map((p) => p.v);
  const summary =
    points.length === 0
      ? input.empty
      : `${points.length} ${input.noun ?? 'requests'}: median ${format(quantile(values, 0.5)!)}, 95th percentile ${format(quantile(values, 0.95)!)}, max ${format(Math.max(...values))}`;
  const head = html`<svg viewBox="0 0 ${W} ${H}" role="img" aria-labelledby="${id}-title ${id}-desc" class="${input.series}" id="${id}-svg" data-points="${points.length}">
  <title id="${id}-title">${input.title}</title><desc id="${id}-desc">${summary}</desc>`;
  if (points.length === 0) {
    return html`${head}<text x="${W / 2}" y="${H / 2}" text-anchor="middle" class="empty">${input.empty}</text></svg>`;
  }
  const sorted = [...points].sort((a, b) => a.t - b.t);
  // Four or so gridlines at round values: a step of 1, 2, 2.5 or 5 times a power of ten, the top a whole step.
  const step = niceCeil(Math.max(...values) / 4);
  const top = step * Math.max(1, Math.ceil(Math.max(...values) / step));
  let t0 = sorted[0]!.t;
  let t1 = sorted.at(-1)!.t;
  if (t1 - t0 < 1000) {
    t0 -= 500;
    t1 += 500;
  }
  const x = (t: number) => round1(LEFT + ((t - t0) / (t1 - t0)) * (W - LEFT - RIGHT));
  const y = (v: number) => round1(TOP + (1 - v / top) * (H - TOP - BOTTOM));
  const ticks = Array.from({ length: Math.round(top / step) + 1 }, (_, i) => i * step);
  const grid = ticks.map(
    (v) =>
      html`<line class="gridline" x1="${LEFT}" x2="${W - RIGHT}" y1="${y(v)}" y2="${y(v)}"></line><text class="axis" x="${LEFT - 6}" y="${y(v) + 4}" text-anchor="end">${format(v)}</text>`,
  );
  const line = sorted.map((p) => `${x(p.t)},${y(p.v)}`).join(' ');
  // Dots carry their value as a tooltip; past a few hundred they would only add weight.
  const dots =
    sorted.length <= 300
      ? sorted.map((p) => html`<circle class="dot" cx="${x(p.t)}" cy="${y(p.v)}" r="2.5"><title>${clock(p.t)} UTC: ${format(p.v)}</title></circle>`)
      : [];
  return html`${head}
  ${grid}
  <text class="axis" x="${LEFT}" y="${H - 8}" text-anchor="start">${clock(t0)}</text>
  <text class="axis" x="${W - RIGHT}" y="${H - 8}" text-anchor="end">${clock(t1)} UTC</text>
  <polyline class="line" points="${line}"></polyline>
  ${dots}
</svg>`;
}
