/** How the console writes numbers, sizes, ages and times: short, unit always shown, the same on every page. */

/** An age or duration: `0.4 s`, `12 s`, `3 min`, `2.5 h`, `3 d`. */
export function duration(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return '–';
  if (ms < 10_000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 120_000) return `${Math.round(ms / 1000)} s`;
  if (ms < 2 * 3600_000) return `${Math.round(ms / 60_000)} min`;
  if (ms < 48 * 3600_000) return `${(ms / 3600_000).toFixed(1)} h`;
  return `${Math.round(ms / 86_400_000)} d`;
}

/** Milliseconds as measured (TTFT): `38 ms`, `1.2 s`. */
export function millis(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return '–';
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
}

/** MiB as an operator reads memory: `512 MiB`, `119.7 GiB`. */
export function mib(value: number | null | undefined): string {
  if (value === null || value === undefined || !Number.isFinite(value)) return '–';
  return value < 1024 ? `${Math.round(value)} MiB` : `${(value / 1024).toFixed(1)} GiB`;
}

/** A count with its noun: `1 replica`, `3 replicas`. */
export function plural(count: number, one: string, many = `${one}s`): string {
  return `${count} ${count === 1 ? one : many}`;
}

/** A number with at most `digits` decimals and thousands separators. */
export function num(value: number | null | undefined, digits = 0): string {
  if (value === null || value === undefined || !Number.isFinite(value)) return '–';
  return value.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: 0 });
}

/** A timestamp in UTC, to the second: `2025-01-31 14:03:07 UTC` (the page shows UTC: operators span time zones). */
export function utc(at: Date | string | null | undefined): string {
  if (!at) return '–';
  const date = typeof at === 'string' ? new Date(at) : at;
  if (Number.isNaN(date.getTime())) return '–';
  return `${date.toISOString().slice(0, 19).replace('T', ' ')} UTC`;
}

/** The machine-readable form for `<time datetime>`. */
export function isoOf(at: Date | string | null | undefined): string {
  if (!at) return '';
  const date = typeof at === 'string' ? new Date(at) : at;
  return Number.isNaN(date.getTime()) ? '' : date.toISOString();
}

export { quantile } from '../../../shared/stats.js';
