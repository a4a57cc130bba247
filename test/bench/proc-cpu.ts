import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';

/** utime and stime in /proc are counted in clock ticks; their length is the kernel's, not always 100 Hz. */
const MS_PER_TICK = 1000 / Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());

interface Stat {
  ppid: number;
  cpuMs: number;
}

function stat(pid: number): Stat | null {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  // The command name (field 2) may hold spaces and parentheses: fields are counted from its closing one.
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  return { ppid: Number(fields[1]), cpuMs: (Number(fields[11]) + Number(fields[12])) * MS_PER_TICK };
}

const allPids = () => readdirSync('/proc').map(Number).filter(Number.isInteger);

/** The processes whose command line (as /proc shows it, arguments joined by spaces) passes `test`. */
export function pidsByCommandLine(test: (line: string) => boolean): number[] {
  return allPids().filter((pid) => {
    try {
      return test(readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' '));
    } catch {
      return false;
    }
  });
}

/** The pid and every process below it (nginx workers, sshd's per-connection children), found by their ppid. */
export function withDescendants(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const child of allPids()) {
    const parent = stat(child)?.ppid;
    if (parent !== undefined) children.set(parent, [...(children.get(parent) ?? []), child]);
  }
  const found = [pid];
  for (let i = 0; i < found.length; i += 1) found.push(...(children.get(found[i]!) ?? []));
  return found;
}

/** The 1-minute load average: how busy the shared machine was beside a round's figures. */
export function loadAverage(): number {
  return Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[0]);
}

/** A named group of processes (an nginx master and its workers, say), resolved again at every snapshot. */
export interface Tracked {
  name: string;
  pids: () => number[];
}

/** CPU ms (user + system) so far, per process of each group. */
export type CpuSnapshot = Map<string, Map<number, number>>;

export function snapshot(tracked: Tracked[]): CpuSnapshot {
  const result: CpuSnapshot = new Map();
  for (const t of tracked) {
    const perPid = new Map<number, number>();
    for (const pid of t.pids()) {
      const s = stat(pid);
      if (s) perPid.set(pid, s.cpuMs);
    }
    result.set(t.name, perPid);
  }
  return result;
}

/**
 * CPU ms per group since `before`. Counted per pid, so that a process born during the round counts whole and
 * one that ended during it costs its group nothing rather than a negative share (its last slice is lost).
 */
export function cpuSince(before: CpuSnapshot, tracked: Tracked[]): Record<string, number> {
  const result: Record<string, number> = {};
  for (const [name, now] of snapshot(tracked)) {
    const then = before.get(name);
    let sum = 0;
    for (const [pid, ms] of now) sum += ms - (then?.get(pid) ?? 0);
    result[name] = sum;
  }
  return result;
}
