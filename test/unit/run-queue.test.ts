import { describe, expect, it } from 'vitest';
import { DEFAULT_AGING_MS, DEFAULT_HOLDING_RUNS, admissionPass, orderQueue, type QueueInput, type QueuedRun } from '../../functions/core/runs/queue.js';
import { hostsOf } from '../../functions/core/runs/hosts.js';
import { pickShape } from '../../functions/core/runs/shape.js';
import type { QueueMachine } from '../../functions/core/runs/hosts.js';
import { fleet, group, machine, run as queuedRun, workspace } from '../helpers/run-fixtures.js';

const HOUR = 3_600_000;
const NOW = 100 * HOUR;
/** A run that has just started waiting unless told otherwise: aging is tried on purpose. */
const run = (id: string, extra: Partial<QueuedRun> = {}) => queuedRun(id, { waitingSince: NOW, ...extra });
const input = (extra: Partial<QueueInput>): QueueInput => ({
  now: NOW,
  runs: [],
  workspaces: [workspace('ws_a'), workspace('ws_b')],
  machines: fleet(2),
  ...extra,
});
const ids = (runs: readonly QueuedRun[]) => runs.map((r) => r.id);
const admittedIds = (i: QueueInput) => admissionPass(i).admitted.map((a) => a.runId);

describe('the order of the queue', () => {
  it('puts higher priority first, then the lower fair share, the earlier submission, the lower id', () => {
    const workspaces = [workspace('ws_a', { gpuSeconds: 1000 }), workspace('ws_b', { gpuSeconds: 10 })];
    const runs = [
      run('r1', { workspaceId: 'ws_a', submittedAt: 1 }),
      run('r2', { workspaceId: 'ws_b', submittedAt: 5 }),
      run('r3', { workspaceId: 'ws_b', submittedAt: 2 }),
      run('r4', { workspaceId: 'ws_a', priority: 5, submittedAt: 9 }),
      run('r6', { workspaceId: 'ws_b', submittedAt: 2 }),
      run('r5', { workspaceId: 'ws_b', submittedAt: 2 }),
    ];
    expect(ids(orderQueue({ runs, workspaces }))).toEqual(['r4', 'r3', 'r5', 'r6', 'r2', 'r1']);
  });

  it('divides GPU-seconds by the weight: twice the weight, twice the GPU-seconds for the same place', () => {
    const runs = [run('a', { workspaceId: 'ws_a', submittedAt: 2 }), run('b', { workspaceId: 'ws_b', submittedAt: 1 })];
    const order = (aSeconds: number) =>
      ids(orderQueue({ runs, workspaces: [workspace('ws_a', { gpuSeconds: aSeconds, weight: 2 }), workspace('ws_b', { gpuSeconds: 100 })] }));
    expect(order(199)).toEqual(['a', 'b']);
    expect(order(200)).toEqual(['b', 'a']);
    expect(order(201)).toEqual(['b', 'a']);
  });

  it('caps each priority at its workspace ceiling', () => {
    const runs = [run('a', { workspaceId: 'ws_a', priority: 900, submittedAt: 2 }), run('b', { workspaceId: 'ws_b', priority: 10, submittedAt: 1 })];
    expect(ids(orderQueue({ runs, workspaces: [workspace('ws_a'), workspace('ws_b')] }))).toEqual(['a', 'b']);
    expect(ids(orderQueue({ runs, workspaces: [workspace('ws_a', { priorityCeiling: 10 }), workspace('ws_b')] }))).toEqual(['b', 'a']);
    expect(ids(orderQueue({ runs, workspaces: [workspace('ws_a', { priorityCeiling: 0 }), workspace('ws_b')] }))).toEqual(['b', 'a']);
  });

  it('is not reordered by aging: an aged run keeps its place, and holds machines instead', () => {
    const runs = [
      run('fresh', { submittedAt: NOW - HOUR, waitingSince: NOW - HOUR }),
      run('aged', { workspaceId: 'ws_b', submittedAt: NOW - 4 * HOUR, waitingSince: NOW - 4 * HOUR }),
      run('high', { priority: 1, submittedAt: NOW, waitingSince: NOW }),
    ];
    const workspaces = [workspace('ws_a'), workspace('ws_b', { gpuSeconds: 1e9 })];
    expect(ids(orderQueue({ runs, workspaces }))).toEqual(['high', 'fresh', 'aged']);
  });

  it('puts a run of an unknown workspace last, and waits it with why', () => {
    const runs = [run('lost', { workspaceId: 'ws_gone', priority: 1000 }), run('ok')];
    expect(ids(orderQueue({ runs, workspaces: [workspace('ws_a')] }))).toEqual(['ok', 'lost']);
    expect(admissionPass(input({ runs })).waiting).toEqual([{ runId: 'lost', reason: 'workspace ws_gone not found', position: 1, holds: [] }]);
  });
});

describe('one admission pass', () => {
  it('places every worker of a run that fits, ranks in order, all at once', () => {
    const result = admissionPass(input({ runs: [run('r', { groups: [group(12)] })] }));
    expect(result.waiting).toEqual([]);
    expect(result.admitted).toEqual([
      {
        runId: 'r',
        workers: [
          ...Array.from({ length: 6 }, (_, rank) => ({ group: null, rank, machineId: 'm00' })),
          ...Array.from({ length: 6 }, (_, i) => ({ group: null, rank: 6 + i, machineId: 'm01' })),
        ],
      },
    ]);
  });

  it('lets a higher-priority run jump the queue', () => {
    const runs = [
      run('early-1', { submittedAt: 1, groups: [group(8)] }),
      run('early-2', { submittedAt: 2, groups: [group(8)] }),
      run('late-high', { workspaceId: 'ws_b', priority: 10, submittedAt: 3, groups: [group(8)] }),
    ];
    const result = admissionPass(input({ runs }));
    expect(result.admitted.map((a) => a.runId)).toEqual(['late-high', 'early-1']);
    expect(result.waiting).toEqual([{ runId: 'early-2', reason: expect.stringContaining('8 workers of 1 GPU each do not fit now'), position: 1, holds: [] }]);
    // Without the ceiling to grant it, it waits its turn.
    const capped = input({ runs, workspaces: [workspace('ws_a'), workspace('ws_b', { priorityCeiling: 0 })] });
    expect(admittedIds(capped)).toEqual(['early-1', 'early-2']);
  });

  it('waits a run over its quota with the reason, and places others behind it', () => {
    const workspaces = [workspace('ws_a', { quota: { gpus: 8 }, usage: { gpus: 6, memoryMiB: 0, replicas: 2 } }), workspace('ws_b')];
    const runs = [
      run('big', { submittedAt: 1, groups: [group(4)] }),
      run('other', { workspaceId: 'ws_b', submittedAt: 2, groups: [group(4)] }),
      run('small', { submittedAt: 3, groups: [group(2)] }),
      run('small-2', { submittedAt: 4, groups: [group(1)] }),
    ];
    const result = admissionPass(input({ runs, workspaces }));
    expect(result.admitted.map((a) => a.runId)).toEqual(['other', 'small']);
    expect(result.waiting).toEqual([
      { runId: 'big', reason: 'workspace quota: needs 4 GPUs, 2 of 8 left', position: 1, holds: [] },
      // The quota counts what this pass admitted too.
      { runId: 'small-2', reason: 'workspace quota: needs 1 GPU, 0 of 8 left', position: 2, holds: [] },
    ]);
  });

  it('checks memory against the quota, and workers never count as replicas', () => {
    const workspaces = [workspace('ws_a', { quota: { memoryMiB: 10_000, replicas: 1 }, usage: { gpus: 0, memoryMiB: 0, replicas: 1 } })];
    const runs = [run('r', { groups: [group(4, 1, { memoryMiB: 3_000 })] }), run('s', { submittedAt: 1, groups: [group(3, 1, { memoryMiB: 3_000 })] })];
    const result = admissionPass(input({ runs, workspaces }));
    expect(result.admitted.map((a) => a.runId)).toEqual(['s']);
    expect(result.waiting[0]!.reason).toBe('workspace quota: needs 12000 MiB, 10000 of 10000 MiB left');
  });

  it('does not let a run that does not fit block smaller runs behind it', () => {
    const machines = [
      machine('m0', { reserved: { gpus: 4, memoryMiB: 0, assignments: 1 } }),
      machine('m1', { reserved: { gpus: 6, memoryMiB: 0, assignments: 1 } }),
    ];
    const runs = [
      run('huge', { submittedAt: 1, groups: [group(16)] }),
      run('four', { submittedAt: 2, groups: [group(4)] }),
      run('two', { submittedAt: 3, groups: [group(2)] }),
    ];
    const result = admissionPass(input({ runs, machines }));
    expect(result.admitted).toEqual([
      { runId: 'four', workers: [0, 1, 2, 3].map((rank) => ({ group: null, rank, machineId: 'm0' })) },
      { runId: 'two', workers: [0, 1].map((rank) => ({ group: null, rank, machineId: 'm1' })) },
    ]);
    expect(result.waiting).toEqual([
      {
        runId: 'huge',
        reason: '16 workers of 1 GPU each do not fit now: as 4 machines x 4 (1 can), 8 machines x 2 (2 can), 16 machines x 1 (2 can)',
        position: 1,
        holds: [],
      },
    ]);
  });

  it('gives each waiting run its position in the queue', () => {
    const runs = Array.from({ length: 5 }, (_, i) => run(`r${i}`, { submittedAt: i, groups: [group(8)] }));
    const result = admissionPass(input({ runs }));
    expect(result.admitted.map((a) => a.runId)).toEqual(['r0', 'r1']);
    expect(result.waiting.map((w) => [w.runId, w.position])).toEqual([
      ['r2', 1],
      ['r3', 2],
      ['r4', 3],
    ]);
  });

  it('leaves a run restarting after a failure until its back-off is over', () => {
    const runs = [run('r', { notBefore: NOW + 30_000 })];
    expect(admissionPass(input({ runs })).waiting[0]!.reason).toBe(`restarting: back-off until ${new Date(NOW + 30_000).toISOString()}`);
    expect(admittedIds(input({ runs: [run('r', { notBefore: NOW })] }))).toEqual(['r']);
  });

  it('places groups one after another, ranks running on across them, or none of them', () => {
    const runs = [run('r', { groups: [group(2, 4, {}, 'trainer'), group(2, 0, { cores: 8 }, 'ps')] })];
    expect(admissionPass(input({ runs })).admitted[0]!.workers).toEqual([
      { group: 'trainer', rank: 0, machineId: 'm00' },
      { group: 'trainer', rank: 1, machineId: 'm00' },
      // Workers without GPUs share the trainer's machine: its cores are free.
      { group: 'ps', rank: 2, machineId: 'm00' },
      { group: 'ps', rank: 3, machineId: 'm00' },
    ]);
    // The second group does not fit: the first group's reservation is given back for the run behind.
    const tooBig = [run('r', { groups: [group(2, 4, {}, 'trainer'), group(3, 8, {}, 'eval')] }), run('s', { submittedAt: 1, groups: [group(16)] })];
    const result = admissionPass(input({ runs: tooBig }));
    expect(result.admitted.map((a) => a.runId)).toEqual(['s']);
    expect(result.waiting[0]!.reason).toMatch(/^group eval: 3 workers of 8 GPUs each do not fit now/);
  });

  it('keeps to the run selector', () => {
    const machines = [machine('a', { labels: { zone: 'a' } }), machine('b', { labels: { zone: 'b' } })];
    const result = admissionPass(
      input({ machines, runs: [run('r', { selector: { zone: 'b' }, groups: [group(8)] }), run('s', { submittedAt: 1, selector: { zone: 'b' } })] }),
    );
    expect(result.admitted).toEqual([{ runId: 'r', workers: Array.from({ length: 8 }, (_, rank) => ({ group: null, rank, machineId: 'b' })) }]);
    expect(result.waiting[0]!.reason).toBe(
      '1 worker of 1 GPU each does not fit now: no machine has room for one; ruled out 1 of 2 machines: 1 label zone=b not present',
    );
  });
});

describe('machines of one workspace, machines shared with the fleet', () => {
  // ws_a and ws_b each enrolled one machine they keep; ws_fleet lent one to the queue.
  const machines = [
    machine('a-own', { workspaceId: 'ws_a', shared: false }),
    machine('b-own', { workspaceId: 'ws_b', shared: false }),
    machine('pool', { workspaceId: 'ws_fleet', shared: true }),
  ];
  const workspaces = [workspace('ws_a'), workspace('ws_b'), workspace('ws_c')];
  const machinesOf = (i: QueueInput) => new Map(admissionPass(i).admitted.map((a) => [a.runId, [...new Set(a.workers.map((w) => w.machineId))]]));

  it("places a run on its workspace's machines and the shared ones, never on another workspace's", () => {
    // 24 GPUs: its own 8 and the pool's 8 are not enough, b-own's 8 would be.
    const big = run('big', { workspaceId: 'ws_a', groups: [group(24)] });
    const result = admissionPass(input({ runs: [big], workspaces, machines }));
    expect(result.admitted).toEqual([]);
    expect(result.waiting[0]!.reason).toMatch(/^24 workers of 1 GPU each do not fit now/);
    const fits = run('fits', { workspaceId: 'ws_a', groups: [group(16)] });
    expect(machinesOf(input({ runs: [fits], workspaces, machines })).get('fits')).toEqual(['a-own', 'pool']);
  });

  it('gives a workspace without machines of its own the shared ones only', () => {
    const runs = [run('c1', { workspaceId: 'ws_c', groups: [group(8)] }), run('c2', { workspaceId: 'ws_c', groups: [group(8)], submittedAt: 1 })];
    const result = admissionPass(input({ runs, workspaces, machines }));
    expect(result.admitted.map((a) => [a.runId, a.workers[0]!.machineId])).toEqual([['c1', 'pool']]);
    expect(result.waiting.map((w) => w.runId)).toEqual(['c2']);
  });

  it("remembers a refusal for the machines a run could reach, not for another workspace's reach", () => {
    // Taken by an earlier run of ws_c, the pool is full: ws_c's next run of 8 is refused, ws_b's same demand is not.
    const runs = [
      run('c1', { workspaceId: 'ws_c', groups: [group(8)] }),
      run('c2', { workspaceId: 'ws_c', groups: [group(8)], submittedAt: 1 }),
      run('b1', { workspaceId: 'ws_b', groups: [group(8)], submittedAt: 2 }),
    ];
    const placed = machinesOf(input({ runs, workspaces, machines }));
    expect([...placed]).toEqual([
      ['c1', ['pool']],
      ['b1', ['b-own']],
    ]);
  });

  it('orders the runs of workspaces competing for shared machines by their fair share', () => {
    const pool = [machine('pool', { shared: true })];
    const runs = [run('a', { workspaceId: 'ws_a', submittedAt: 1, groups: [group(8)] }), run('b', { workspaceId: 'ws_b', submittedAt: 2, groups: [group(8)] })];
    const shares = (a: number, b: number) => [workspace('ws_a', { gpuSeconds: a }), workspace('ws_b', { gpuSeconds: b })];
    expect(admittedIds(input({ runs, workspaces: shares(0, 0), machines: pool }))).toEqual(['a']);
    expect(admittedIds(input({ runs, workspaces: shares(3600, 0), machines: pool }))).toEqual(['b']);
  });
});

describe('aging', () => {
  const busy = (gpus: number[]) => gpus.map((g, i) => machine(`m${i}`, { reserved: { gpus: g, memoryMiB: 0, assignments: 1 } }));

  it('holds the machines an aged run would take once emptied, so that smaller runs stop backfilling them', () => {
    const machines = busy([6, 2, 4, 8]);
    const big = run('big', { workspaceId: 'ws_b', groups: [group(16)], submittedAt: NOW - 3 * HOUR, waitingSince: NOW - 3 * HOUR });
    const smalls = [1, 2, 3].map((i) => run(`small-${i}`, { submittedAt: NOW - i, waitingSince: NOW - i, groups: [group(2)] }));
    const before = admissionPass(input({ machines, runs: [big, ...smalls], agingMs: 4 * HOUR }));
    expect(before.admitted.map((a) => a.runId)).toEqual(['small-3', 'small-2', 'small-1']);
    expect(before.waiting[0]!.holds).toEqual([]);

    const after = admissionPass(input({ machines, runs: [big, ...smalls], agingMs: 2 * HOUR }));
    expect(after.waiting[0]).toEqual({
      runId: 'big',
      reason: expect.stringMatching(/do not fit now: .*; aged \(waiting 180 min\): holding machines m1, m2, which smaller runs no longer backfill$/),
      position: 1,
      holds: ['m1', 'm2'],
    });
    // m1 (6 free) and m2 (4 free) are held; the small runs only get m0's 2 GPUs.
    expect(after.admitted).toEqual([{ runId: 'small-3', workers: [0, 1].map((rank) => ({ group: null, rank, machineId: 'm0' })) }]);
    expect(after.waiting.map((w) => w.runId)).toEqual(['big', 'small-2', 'small-1']);
    expect(after.waiting[1]!.reason).toContain('ruled out 2 of 4 machines: 2 held for aged run big');
  });

  it('does not hold anything for a run over its quota or that could never fit', () => {
    const machines = busy([4, 4]);
    const aged = { submittedAt: 0, waitingSince: 0 };
    const quota = [workspace('ws_a', { quota: { gpus: 8 } })];
    const overQuota = admissionPass(input({ machines, workspaces: quota, runs: [run('big', { ...aged, groups: [group(16)] })] }));
    expect(overQuota.waiting[0]).toEqual({ runId: 'big', reason: 'workspace quota: needs 16 GPUs, 8 of 8 left', position: 1, holds: [] });
    const never = admissionPass(input({ machines, runs: [run('huge', { ...aged, groups: [group(24)] })] }));
    expect(never.waiting[0]!.holds).toEqual([]);
    expect(never.waiting[0]!.reason).toMatch(
      /; aged \(waiting 6000 min\), but 24 workers of 1 GPU each would not fit even on emptied machines: as 3 machines x 8 \(2 can\)/,
    );
  });

  it('holds disjoint machines for two aged runs, in the queue order', () => {
    const machines = busy([1, 1, 1]);
    const runs = [
      run('second', { groups: [group(16)], waitingSince: 2, submittedAt: 2 }),
      run('first', { groups: [group(16)], waitingSince: 1, submittedAt: 1 }),
    ];
    const result = admissionPass(input({ machines, runs }));
    expect(result.waiting.map((w) => [w.runId, w.holds])).toEqual([
      ['first', ['m0', 'm1']],
      ['second', []],
    ]);
    expect(result.waiting[1]!.reason).toContain('would not fit even on emptied machines');
  });
});

describe('aging, bounded', () => {
  it('ages a run after 2 hours and lets 4 aged runs hold machines, unless told otherwise', () => {
    expect(DEFAULT_AGING_MS).toBe(2 * HOUR);
    expect(DEFAULT_HOLDING_RUNS).toBe(4);
    const machines = Array.from({ length: 6 }, (_, i) => machine(`m${i}`, { reserved: { gpus: 8, memoryMiB: 0, assignments: 1 } }));
    const runs = Array.from({ length: 6 }, (_, i) =>
      run(`r${i}`, { submittedAt: i, waitingSince: NOW - DEFAULT_AGING_MS + (i === 5 ? 1 : 0), groups: [group(8)] }),
    );
    const waiting = admissionPass(input({ machines, runs })).waiting;
    expect(waiting.map((w) => w.holds.length)).toEqual([1, 1, 1, 1, 0, 0]);
    expect(waiting[4]!.reason).toContain('holds machines once one of the 4 aged runs ahead of it starts');
    expect(waiting[5]!.reason).not.toContain('aged');
  });

  it('lets only the first aged runs in the queue order hold machines, so that backfilling goes on elsewhere', () => {
    const machines = Array.from({ length: 6 }, (_, i) => machine(`m${i}`, { reserved: { gpus: 8, memoryMiB: 0, assignments: 1 } }));
    const aged = Array.from({ length: 3 }, (_, i) => run(`aged-${i}`, { submittedAt: i, waitingSince: 0, groups: [group(8)] }));
    const result = admissionPass(input({ machines, runs: aged, holdingRuns: 2 }));
    expect(result.waiting.map((w) => [w.runId, w.holds])).toEqual([
      ['aged-0', ['m0']],
      ['aged-1', ['m1']],
      ['aged-2', []],
    ]);
    expect(result.waiting[2]!.reason).toMatch(/; aged \(waiting 6000 min\): holds machines once one of the 2 aged runs ahead of it starts$/);
  });
});

describe('the pass as a whole', () => {
  /** A random but reproducible fleet and queue. */
  function scenario(seed: number): QueueInput {
    let s = seed;
    const random = (n: number) => {
      s = (s * 1_103_515_245 + 12_345) % 2 ** 31;
      return s % n;
    };
    const machines: QueueMachine[] = Array.from({ length: 30 }, (_, i) =>
      machine(`m${String(i).padStart(2, '0')}`, {
        labels: { zone: random(2) === 0 ? 'a' : 'b' },
        liveness: random(10) === 0 ? 'stale' : 'ready',
        reserved: { gpus: random(9), memoryMiB: 0, assignments: 1, cores: random(32) },
      }),
    );
    const workspaces = ['ws_a', 'ws_b', 'ws_c'].map((id) =>
      workspace(id, { gpuSeconds: random(1000), quota: random(2) === 0 ? { gpus: 40 + random(40) } : {}, priorityCeiling: random(3) }),
    );
    const runs = Array.from({ length: 200 }, (_, i) => {
      const gpus = [0, 1, 2, 4, 8][random(5)]!;
      return run(`r${i}`, {
        workspaceId: workspaces[random(3)]!.id,
        priority: random(4),
        submittedAt: random(100),
        waitingSince: NOW - random(4) * HOUR,
        selector: random(3) === 0 ? { zone: 'b' } : {},
        groups: [group(1 + random(12), gpus, { cores: random(3) * 4 })],
      });
    });
    return { now: NOW, runs, workspaces, machines, agingMs: 2 * HOUR };
  }

  it('is deterministic: the same input, in any order, gives the same decisions', () => {
    for (let seed = 1; seed <= 5; seed++) {
      const i = scenario(seed);
      const once = admissionPass(i);
      expect(admissionPass(scenario(seed))).toEqual(once);
      expect(admissionPass({ ...i, runs: [...i.runs].reverse(), machines: [...i.machines].reverse() })).toEqual(once);
    }
  });

  it('never overcommits a machine or a quota, and every refusal from memory is still true at the end', () => {
    for (let seed = 1; seed <= 20; seed++) {
      const i = { ...scenario(seed), agingMs: Number.POSITIVE_INFINITY };
      const result = admissionPass(i);
      const byId = new Map(i.machines.map((m) => [m.id, { ...m, reserved: { ...m.reserved } }]));
      const runById = new Map(i.runs.map((r) => [r.id, r]));
      const added = new Map<string, number>();
      for (const admitted of result.admitted) {
        const r = runById.get(admitted.runId)!;
        for (const worker of admitted.workers) {
          const need = r.groups[0]!.need;
          const m = byId.get(worker.machineId)!;
          const before = { ...m.reserved };
          m.reserved = {
            gpus: before.gpus + need.gpus,
            memoryMiB: before.memoryMiB + need.memoryMiB,
            assignments: before.assignments + 1,
            cores: (before.cores ?? 0) + need.cores,
          };
          added.set(r.workspaceId, (added.get(r.workspaceId) ?? 0) + need.gpus);
        }
      }
      const machinesAfter = [...byId.values()];
      const touched = new Set(result.admitted.flatMap((a) => a.workers.map((w) => w.machineId)));
      for (const host of hostsOf(machinesAfter).filter((h) => touched.has(h.id))) {
        expect(host.unavailable).toBeNull();
        expect(host.free.gpus).toBeGreaterThanOrEqual(0);
        expect(host.free.cores).toBeGreaterThanOrEqual(0);
        expect(host.free.memoryMiB).toBeGreaterThanOrEqual(0);
      }
      for (const w of i.workspaces) if (w.quota.gpus !== undefined) expect(added.get(w.id) ?? 0).toBeLessThanOrEqual(w.quota.gpus);
      for (const waiting of result.waiting) {
        if (waiting.reason.startsWith('workspace quota')) continue;
        const r = runById.get(waiting.runId)!;
        const g = r.groups[0]!;
        expect(pickShape(hostsOf(machinesAfter), { workers: g.workers, need: g.need, selector: r.selector }), waiting.reason).toHaveProperty('reason');
      }
    }
  });
});
