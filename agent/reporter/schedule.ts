import { backoffDelayMs } from '../link/backoff.js';

/**
 * When an agent reports (docs/design.md section 4, liveness): agents started together, by a power cut or a
 * control-plane restart, must not report in step for ever, and one lost report must not cost a whole interval.
 * Pure; `random` is injectable so that every bound can be tested.
 */

/** Each keep-alive interval varies by this fraction either way. */
export const INTERVAL_JITTER = 0.1;

/** The first report after start waits a random part of this (at most a quarter of the interval). */
export const FIRST_REPORT_SPREAD_MS = 2_000;

/** Retries of a failed report start at this and double, with full jitter... */
export const RETRY_BASE_MS = 200;
/** ...up to this, or a quarter of the interval when that is shorter: a retry never waits most of an interval. */
export const RETRY_CAP_MS = 5_000;
/** Retries spaced closer than this would only add load to a control plane that is failing. */
const RETRY_FLOOR_MS = 50;

/** The delay to the next keep-alive: the interval, ±INTERVAL_JITTER. */
export function keepAliveDelayMs(intervalMs: number, random: () => number = Math.random): number {
  return Math.round(intervalMs * (1 - INTERVAL_JITTER + 2 * INTERVAL_JITTER * random()));
}

/** The delay of the first report after start: uniform in [0, min(FIRST_REPORT_SPREAD_MS, interval / 4)). */
export function firstReportDelayMs(intervalMs: number, random: () => number = Math.random): number {
  return Math.floor(random() * Math.min(FIRST_REPORT_SPREAD_MS, intervalMs / 4));
}

/**
 * What to do after a report failed: `retry` it (the network, a timeout, the control plane's own failure or
 * overload), `resync` the clock first and then retry (refused for clock skew), or `drop` it (a refusal that
 * the same request would get again; the next regular report tries anew).
 */
export function afterReportFailure(failure: { status: number; code: string }): 'retry' | 'resync' | 'drop' {
  if (failure.code === 'clock_skew') return 'resync';
  if (failure.status === 0 || failure.status === 408 || failure.status === 429 || failure.status >= 500) return 'retry';
  return 'drop';
}

/**
 * The delay before retrying after `failures` consecutive failed reports (1 for the first), or null when the
 * retry would not come before the next regular report at `nextRegularInMs`, which supersedes it.
 */
export function retryDelayMs(failures: number, nextRegularInMs: number, intervalMs: number, random: () => number = Math.random): number | null {
  const capMs = Math.max(RETRY_FLOOR_MS, Math.min(RETRY_CAP_MS, intervalMs / 4));
  const delay = backoffDelayMs(Math.max(0, failures - 1), { baseMs: RETRY_BASE_MS, capMs, floorMs: RETRY_FLOOR_MS, random });
  return delay < nextRegularInMs ? delay : null;
}
