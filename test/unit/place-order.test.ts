import { describe, expect, it } from 'vitest';
import { machineMemoryMiB, placeReplica, type CandidateMachine, type PlacementRequest } from '../../functions/core/scheduler/place.js';
import { TEST_INVENTORY } from '../helpers/machine.js';
import { observedMachine } from '../helpers/reconcile-fixtures.js';

/** A small deterministic generator (mulberry32), so that a failure names the seed that shows it. */
function random(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The documented order, as a full sort: what the one-pass pick must agree with. */
function bestBySort(machines: readonly CandidateMachine[], request: PlacementRequest, eligible: ReadonlySet<string>): string | null {
  const free = (m: CandidateMachine) => machineMemoryMiB(m.inventory) - m.reserved.memoryMiB;
  const here = (m: CandidateMachine) => m.replicaCounts?.get(request.deploymentId) ?? 0;
  const warm = (m: CandidateMachine) => (m.warmModels.includes(request.model) || m.cachedVersions.includes(request.versionId ?? '') ? 0 : 1);
  const sorted = machines
    .filter((m) => eligible.has(m.id))
    .sort(
      (a, b) =>
        here(a) - here(b) ||
        a.reserved.assignments - b.reserved.assignments ||
        warm(a) - warm(b) ||
        free(b) - free(a) ||
        a.load - b.load ||
        (a.id < b.id ? -1 : a.id > b.id ? 1 : 0),
    );
  return sorted[0]?.id ?? null;
}

/** A machine's current replicas of set `d`: `n` of them. */
const replicasOfD = (n: number) => ({ deploymentIds: new Set(n > 0 ? ['d'] : []), replicaCounts: new Map(n > 0 ? [['d', n]] : []) });

describe('placeReplica picks, in one pass, the first machine of the documented order', () => {
  it('agrees with a full sort on 500 random fleets, and explains every machine it did not pick exactly once', () => {
    for (let seed = 1; seed <= 500; seed += 1) {
      const next = random(seed);
      const pick = <T>(values: readonly T[]) => values[Math.floor(next() * values.length)]!;
      const machines: CandidateMachine[] = Array.from({ length: 1 + Math.floor(next() * 12) }, (_, i) => ({
        ...observedMachine(`m${pick(['a', 'b', 'c'])}${i}`, { labels: pick([{ zone: 'a' }, { zone: 'b' }]) }, TEST_INVENTORY),
        liveness: pick(['ready', 'ready', 'ready', 'stale'] as const),
        cordoned: next() < 0.1,
        warmModels: next() < 0.3 ? ['chat'] : [],
        cachedVersions: next() < 0.3 ? ['mv_1'] : [],
        load: Math.floor(next() * 3),
        reserved: { gpus: 0, memoryMiB: pick([0, 1024, 4096]), assignments: Math.floor(next() * 3) },
        ...replicasOfD(pick([0, 0, 0, 1, 2])),
      }));
      // Half the requests reserve nothing (one replica per machine), half reserve memory (spread, then stacked).
      const request: PlacementRequest = {
        deploymentId: 'd',
        model: 'chat',
        selector: next() < 0.3 ? { zone: 'b' } : {},
        gpus: 0,
        memoryMiB: pick([0, 1]),
        versionId: pick([null, 'mv_1']),
      };
      const decision = placeReplica(machines, request);
      const filteredOut = new Set(decision.rejected.filter((r) => r.reason !== 'scored lower').map((r) => r.machineId));
      const eligible = new Set(machines.map((m) => m.id).filter((id) => !filteredOut.has(id)));
      expect(decision.machineId, `seed ${seed}`).toBe(bestBySort(machines, request, eligible));
      const explained = decision.rejected.map((r) => r.machineId);
      expect(new Set(explained).size, `seed ${seed}`).toBe(explained.length);
      expect(explained.length + (decision.machineId ? 1 : 0), `seed ${seed}`).toBe(machines.length);
    }
  });
});
