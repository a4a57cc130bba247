import { describe, expect, it } from 'vitest';
import { pickReplica, routeCandidates, type RouteCandidate } from '../../functions/core/scheduler/route.js';

const replica = (assignmentId: string, over: Partial<RouteCandidate> = {}): RouteCandidate & { machineName: string } => ({
  assignmentId,
  machineId: `mch_${assignmentId}`,
  machineName: `node-${assignmentId}`,
  active: 0,
  queued: 0,
  concurrency: 4,
  warm: true,
  ...over,
});

describe('pickReplica', () => {
  it('picks the least expected queue delay, counting queued work and concurrency', () => {
    const picked = pickReplica([replica('a', { active: 3 }), replica('b', { active: 1, queued: 1 }), replica('c', { active: 4, concurrency: 8 })]);
    // (1+1+1)/4 = 0.75 for b and (4+0+1)/8 = 0.625 for c.
    expect(picked?.assignmentId).toBe('c');
  });

  it('breaks a tie by warmth, then by the lowest id, whatever the order given', () => {
    const tied = [replica('b'), replica('c', { warm: false }), replica('a', { warm: false })];
    expect(pickReplica(tied)?.assignmentId).toBe('b');
    expect(pickReplica([replica('c'), replica('a'), replica('b')])?.assignmentId).toBe('a');
  });

  it('skips the replicas already tried and answers null when none is left', () => {
    const candidates = [replica('a'), replica('b')];
    expect(pickReplica(candidates, new Set(['a']))?.assignmentId).toBe('b');
    expect(pickReplica(candidates, new Set(['a', 'b']))).toBeNull();
    expect(pickReplica([])).toBeNull();
  });

  it('hands back the candidate given, with its own fields', () => {
    expect(pickReplica([replica('a')])?.machineName).toBe('node-a');
  });
});

describe('routeCandidates', () => {
  const replicas = [
    { assignmentId: 'a', machineId: 'mch_a', machineName: 'node-a', warm: false },
    { assignmentId: 'b', machineId: 'mch_b', machineName: 'node-b', warm: true },
  ];
  const idle = () => ({ active: 0, queued: 0 });

  it("carries each replica's reported warmth, so the tie-break prefers the runtime that served recently", () => {
    const candidates = routeCandidates(replicas, 4, idle);
    expect(candidates.map((c) => [c.assignmentId, c.warm])).toEqual([
      ['a', false],
      ['b', true],
    ]);
    expect(pickReplica(candidates)?.assignmentId).toBe('b');
    // All cold, the lowest id wins again.
    expect(
      pickReplica(
        routeCandidates(
          replicas.map((r) => ({ ...r, warm: false })),
          4,
          idle,
        ),
      )?.assignmentId,
    ).toBe('a');
  });

  it("adds this instance's load and the deployment's concurrency, keeping the replica's own fields", () => {
    const load: Record<string, { active: number; queued: number }> = { a: { active: 1, queued: 0 }, b: { active: 4, queued: 2 } };
    const candidates = routeCandidates(replicas, 4, (id) => load[id]!);
    expect(candidates[1]).toEqual({ assignmentId: 'b', machineId: 'mch_b', machineName: 'node-b', warm: true, active: 4, queued: 2, concurrency: 4 });
    // Warmth only breaks ties: the busy warm replica loses to the idler cold one.
    expect(pickReplica(candidates)?.machineName).toBe('node-a');
  });
});
