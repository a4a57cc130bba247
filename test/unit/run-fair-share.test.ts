import { describe, expect, it } from 'vitest';
import { DEFAULT_FAIR_SHARE_WINDOW_MS, fairShare, gpuSecondsInWindow, type GpuHold } from '../../functions/core/runs/fair-share.js';
import { admissionPass, type QueuedRun } from '../../functions/core/runs/queue.js';
import { demandTotal } from '../../functions/core/runs/demand.js';
import type { QueueMachine } from '../../functions/core/runs/hosts.js';
import { fleet, group, run, workspace } from '../helpers/run-fixtures.js';

const MIN = 60_000;
const HOUR = 60 * MIN;

describe('GPU-seconds in the window', () => {
  it('counts each hold by its overlap with the window, a hold still open up to now', () => {
    const now = 10 * HOUR;
    const holds: GpuHold[] = [
      { workspaceId: 'a', gpus: 2, from: now - 30 * MIN, to: null },
      { workspaceId: 'a', gpus: 8, from: now - 5 * HOUR, to: now - 4 * HOUR },
      { workspaceId: 'b', gpus: 4, from: now - 3 * HOUR, to: now - HOUR },
      { workspaceId: 'b', gpus: 4, from: now - 26 * HOUR, to: now - 25 * HOUR },
      { workspaceId: 'c', gpus: 0, from: now - HOUR, to: null },
    ];
    expect(gpuSecondsInWindow(holds, now, 4 * HOUR)).toEqual(
      new Map([
        ['a', 2 * 30 * 60],
        ['b', 4 * 2 * 3600],
      ]),
    );
    // A hold straddling the window's start counts from it; one ending after now counts up to now.
    expect(gpuSecondsInWindow([{ workspaceId: 'a', gpus: 1, from: now - 5 * HOUR, to: now + HOUR }], now, 2 * HOUR)).toEqual(new Map([['a', 2 * 3600]]));
    expect(DEFAULT_FAIR_SHARE_WINDOW_MS).toBe(24 * HOUR);
    expect(gpuSecondsInWindow([{ workspaceId: 'a', gpus: 1, from: now - 25 * HOUR, to: null }], now)).toEqual(new Map([['a', 24 * 3600]]));
  });

  it('divides by the weight, a workspace without weight last', () => {
    expect(fairShare(3600, 2)).toBe(1800);
    expect(fairShare(0, 1)).toBe(0);
    expect(fairShare(0, 0)).toBe(Number.POSITIVE_INFINITY);
  });
});

interface Job {
  run: QueuedRun;
  durationMs: number;
}

/**
 * Runs the queue as the controller would: a pass at every submission and every end, each admitted run holding its
 * GPUs for its duration, shares computed from those holds over the window. Gives what each workspace held within
 * the horizon, and when each run started.
 */
function simulate(input: {
  machines: QueueMachine[];
  jobs: Job[];
  weights: Record<string, number>;
  horizonMs: number;
  windowMs: number;
  agingMs?: number;
  withoutFairShare?: boolean;
}): { gpuSeconds: Map<string, number>; startedAt: Map<string, number> } {
  const holds: GpuHold[] = [];
  const running: Array<{ end: number; machineGpus: Map<string, number> }> = [];
  const startedAt = new Map<string, number>();
  const waiting = new Map(input.jobs.map((job) => [job.run.id, job]));
  const submissions = [...new Set(input.jobs.map((j) => j.run.submittedAt))].sort((a, b) => a - b);
  let now = 0;
  while (now <= input.horizonMs) {
    running.splice(0, running.length, ...running.filter((r) => r.end > now));
    const reserved = new Map<string, number>();
    for (const r of running) for (const [m, g] of r.machineGpus) reserved.set(m, (reserved.get(m) ?? 0) + g);
    const machines = input.machines.map((m) => ({ ...m, reserved: { gpus: reserved.get(m.id) ?? 0, memoryMiB: 0, assignments: 0 } }));
    const seconds = gpuSecondsInWindow(holds, now, input.windowMs);
    const workspaces = Object.entries(input.weights).map(([id, weight]) =>
      workspace(id, { weight, gpuSeconds: input.withoutFairShare ? 0 : (seconds.get(id) ?? 0) }),
    );
    const runs = [...waiting.values()].filter((j) => j.run.submittedAt <= now).map((j) => j.run);
    for (const admitted of admissionPass({ now, runs, workspaces, machines, agingMs: input.agingMs }).admitted) {
      const job = waiting.get(admitted.runId)!;
      waiting.delete(admitted.runId);
      startedAt.set(admitted.runId, now);
      const gpusEach = job.run.groups[0]!.need.gpus;
      const machineGpus = new Map<string, number>();
      for (const w of admitted.workers) machineGpus.set(w.machineId, (machineGpus.get(w.machineId) ?? 0) + gpusEach);
      running.push({ end: now + job.durationMs, machineGpus });
      holds.push({ workspaceId: job.run.workspaceId, gpus: demandTotal(job.run.groups).gpus, from: now, to: now + job.durationMs });
    }
    const next = Math.min(...running.map((r) => r.end), ...submissions.filter((t) => t > now));
    if (!Number.isFinite(next)) break;
    now = next;
  }
  return { gpuSeconds: gpuSecondsInWindow(holds, input.horizonMs, input.horizonMs), startedAt };
}

/** `count` runs of one workspace, 8 GPUs each (8 workers of 1), lasting 20 to 40 minutes, submitted in a burst from `from`. */
function burst(workspaceId: string, count: number, from: number): Job[] {
  return Array.from({ length: count }, (_, i) => ({
    run: run(`${workspaceId}-${String(i).padStart(4, '0')}`, { workspaceId, submittedAt: from + i, waitingSince: from + i, groups: [group(8)] }),
    durationMs: (20 + ((i * 7) % 21)) * MIN,
  }));
}

describe('fair share over time', () => {
  const day = { horizonMs: 24 * HOUR, windowMs: 24 * HOUR, machines: fleet(8) };
  // Every run of a is submitted before any of b: submission order alone would give a the whole fleet.
  const jobs = [...burst('a', 500, 0), ...burst('b', 500, 1000)];

  it('gives two workspaces of equal weight, submitting equal runs at the same priority, GPU-seconds within 10 % of each other', () => {
    const { gpuSeconds } = simulate({ ...day, jobs, weights: { a: 1, b: 1 } });
    const a = gpuSeconds.get('a')!;
    const b = gpuSeconds.get('b')!;
    // The fleet was kept busy: 64 GPUs for (nearly) the whole day.
    expect(a + b).toBeGreaterThan(0.95 * 64 * 24 * 3600);
    expect(Math.abs(a - b) / Math.max(a, b)).toBeLessThan(0.1);
  });

  it('without fair share, the earlier submitter would have taken it all', () => {
    const { gpuSeconds } = simulate({ ...day, jobs, weights: { a: 1, b: 1 }, withoutFairShare: true });
    expect(gpuSeconds.get('b') ?? 0).toBe(0);
  });

  it('follows the weights: weight 2 against 1 gets about two thirds', () => {
    const { gpuSeconds } = simulate({ ...day, jobs: [...burst('a', 500, 1000), ...burst('b', 500, 0)], weights: { a: 2, b: 1 } });
    const share = gpuSeconds.get('a')! / (gpuSeconds.get('a')! + gpuSeconds.get('b')!);
    expect(Math.abs(share - 2 / 3)).toBeLessThan(0.1 * (2 / 3));
  });
});

describe('aging over time', () => {
  // A stream of small runs (1 GPU, 30 to 90 minutes, staggered) keeps 4 machines of 8 GPUs busy; 10 minutes in, a
  // run of 32 GPUs (4 machines x 8) is submitted. Its workspace has used nothing, so it is first in the queue, but
  // all 32 GPUs are never free at once: every GPU freed is backfilled by a small run.
  const small: Job[] = Array.from({ length: 600 }, (_, i) => ({
    run: run(`small-${String(i).padStart(4, '0')}`, { workspaceId: 'a', submittedAt: i, waitingSince: i, groups: [group(1)] }),
    durationMs: (30 + ((i * 37) % 61)) * MIN,
  }));
  const big: Job = { run: run('big', { workspaceId: 'b', submittedAt: 10 * MIN, waitingSince: 10 * MIN, groups: [group(32)] }), durationMs: HOUR };
  const setup = { machines: fleet(4), jobs: [...small, big], weights: { a: 1, b: 1 }, horizonMs: 12 * HOUR, windowMs: 24 * HOUR };

  it('without aging, a big run is starved by smaller runs backfilling', () => {
    const { startedAt } = simulate({ ...setup, agingMs: Number.POSITIVE_INFINITY });
    expect(startedAt.has('big')).toBe(false);
    expect(startedAt.size).toBeGreaterThan(100);
  });

  it('an aged big run holds machines and starts once what ran there ends', () => {
    const agingMs = 2 * HOUR;
    const { startedAt } = simulate({ ...setup, agingMs });
    const started = startedAt.get('big');
    expect(started).toBeDefined();
    // Aged 2 h after its submission; the small runs on its machines end within 90 minutes.
    expect(started!).toBeGreaterThanOrEqual(10 * MIN + agingMs);
    expect(started!).toBeLessThanOrEqual(10 * MIN + agingMs + 90 * MIN);
    // Small runs went on before it aged and after it started.
    expect([...startedAt.values()].some((t) => t > 10 * MIN && t < 10 * MIN + agingMs)).toBe(true);
    expect([...startedAt.values()].some((t) => t > started! + HOUR)).toBe(true);
  });
});
