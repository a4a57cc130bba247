import { execFileSync } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { loadavg } from 'node:os';

/** Seconds from `fromMs` (a `performance.now()` reading) to `toMs`, to the hundredth. */
export function secondsSince(fromMs: number, toMs = performance.now()): number {
  return Math.round((toMs - fromMs) / 10) / 100;
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** The `p` percentile (0-100, nearest rank) of `values`; null when there are none. */
export function percentile(values: readonly number[], p: number): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

/** Non-200 statuses counted, "503 x12, 0 x2" (0: no answer), or "none". */
export function countFailures(statuses: Iterable<number>): string {
  const counts = new Map<number, number>();
  for (const status of statuses) if (status !== 200) counts.set(status, (counts.get(status) ?? 0) + 1);
  return [...counts].map(([status, n]) => `${status} x${n}`).join(', ') || 'none';
}

export const roundMs = (ms: number | null) => (ms === null ? null : Math.round(ms * 10) / 10);

/** The 1, 5 and 15 minute load averages, to the hundredth: the machine is shared, so every figure comes with it. */
export function loadAverage(): number[] {
  return loadavg().map((v) => Math.round(v * 100) / 100);
}

/** Clock ticks per second of /proc/<pid>/stat's CPU times (100 on every Linux this runs on, asked anyway). */
const CLOCK_TICKS = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();

export interface ProcessSample {
  rssMiB: number;
  cpuS: number;
}

/** A process's resident memory and the CPU seconds it has used, from /proc; null once it is gone. */
export async function processSample(pid: number): Promise<ProcessSample | null> {
  try {
    const status = await readFile(`/proc/${pid}/status`, 'utf8');
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    const rssKiB = Number(/^VmRSS:\s+(\d+)/m.exec(status)?.[1] ?? 0);
    // Fields after the parenthesised command name (which may hold spaces): utime and stime are the 12th and 13th.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const ticks = Number(fields[11]) + Number(fields[12]);
    return { rssMiB: Math.round(rssKiB / 102.4) / 10, cpuS: ticks / CLOCK_TICKS };
  } catch {
    return null;
  }
}

/** The share of one core a process used between two samples `seconds` apart, in percent. */
export function cpuPercent(from: ProcessSample | null, to: ProcessSample | null, seconds: number): number | null {
  return from && to ? Math.round(((to.cpuS - from.cpuS) / seconds) * 1000) / 10 : null;
}

/**
 * Polls `check` every `intervalMs` until it answers true, for at most `timeoutMs`: the seconds it took from
 * `fromMs` (a `performance.now()` reading, now by default), or null when it never did. Errors of `check` (a
 * control plane that does not answer yet) count as false: in a chaos run, not happening is a result.
 */
export async function secondsUntil(check: () => Promise<boolean>, opts: { timeoutMs: number; intervalMs?: number; fromMs?: number }): Promise<number | null> {
  const from = opts.fromMs ?? performance.now();
  const deadline = performance.now() + opts.timeoutMs;
  for (;;) {
    if (await check().catch(() => false)) return secondsSince(from);
    if (performance.now() > deadline) return null;
    await sleep(opts.intervalMs ?? 250);
  }
}
