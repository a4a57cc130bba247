import { describe, expect, it } from 'vitest';
import {
  gpuMemoryEachMiB,
  placeReplica,
  type CandidateMachine,
  type PlacementConstraint,
  type PlacementRequest,
} from '../../functions/core/scheduler/place.js';
import { reconcile } from '../../functions/core/fleet/reconcile.js';
import type { GpuDevice, Inventory } from '../../shared/contracts/inventory.js';
import { TEST_INVENTORY } from '../helpers/machine.js';
import { currentAssignment, desiredDeployment, observedMachine } from '../helpers/reconcile-fixtures.js';

const gpu = (memoryTotalMiB: number | null, unifiedMemory = false): GpuDevice => ({
  index: 0,
  uuid: null,
  name: unifiedMemory ? 'NVIDIA GB10' : 'H100',
  memoryTotalMiB,
  memoryUsedMiB: null,
  unifiedMemory,
  driverVersion: null,
  utilizationPercent: null,
  temperatureC: null,
  powerDrawW: null,
});
const withGpus = (gpus: GpuDevice[], memoryTotalMiB = 131_072): Inventory => ({ ...TEST_INVENTORY, memoryTotalMiB, gpus });
const H100x2 = withGpus([gpu(81_559), gpu(81_559)]);
const spark = withGpus([gpu(null, true)], 131_072);

const candidate = (id: string, extra: Partial<CandidateMachine> = {}): CandidateMachine => ({
  ...observedMachine(id, {}, H100x2),
  reserved: { gpus: 0, memoryMiB: 0, assignments: 0 },
  deploymentIds: new Set(),
  replicaCounts: new Map(),
  ...extra,
});
const request = (extra: Partial<PlacementRequest> = {}): PlacementRequest => ({
  deploymentId: 'd',
  model: 'chat',
  selector: {},
  gpus: 1,
  memoryMiB: 0,
  ...extra,
});
const here = (n: number, setId = 'd') => ({ deploymentIds: new Set([setId]), replicaCounts: new Map([[setId, n]]) });

describe('memory per GPU', () => {
  it('is the smallest discrete GPU, host memory on unified-memory machines and where GPUs report none, none without GPUs', () => {
    expect(gpuMemoryEachMiB(withGpus([gpu(81_559), gpu(40_960)]))).toBe(40_960);
    expect(gpuMemoryEachMiB(spark)).toBe(131_072);
    expect(gpuMemoryEachMiB(withGpus([gpu(null)], 65_536))).toBe(65_536);
    expect(gpuMemoryEachMiB(TEST_INVENTORY)).toBeNull();
  });

  it('filters machines whose GPUs are too small, and says by how much', () => {
    const machines = [
      candidate('small', { inventory: withGpus([gpu(40_960)]) }),
      candidate('cpu', { inventory: TEST_INVENTORY }),
      candidate('spark', { inventory: spark }),
      candidate('big'),
    ];
    const decision = placeReplica(machines, request({ gpus: 0, gpuMemoryMiB: 80_000 }));
    expect(decision.machineId).toBe('big');
    expect(decision.rejected).toEqual([
      { machineId: 'small', reason: 'needs GPUs of 80000 MiB, its GPUs have 40960 MiB' },
      { machineId: 'cpu', reason: 'needs GPUs of 80000 MiB, has no GPU' },
      { machineId: 'spark', reason: 'scored lower' },
    ]);
    // The unified-memory GB10 offers the machine's memory to its one GPU.
    expect(placeReplica([candidate('spark', { inventory: spark })], request({ gpuMemoryMiB: 120_000 })).machineId).toBe('spark');
    expect(placeReplica([candidate('spark', { inventory: spark })], request({ gpuMemoryMiB: 140_000 })).rejected).toEqual([
      { machineId: 'spark', reason: 'needs GPUs of 140000 MiB, its GPUs have 131072 MiB' },
    ]);
  });
});

describe('several replicas per machine', () => {
  it('a set that reserves may place another replica on a machine that already runs one, up to replicasPerMachine, while it fits', () => {
    const stacking = (extra = {}) => request({ replicasPerMachine: 4, ...extra });
    expect(placeReplica([candidate('m1', { ...here(1), reserved: { gpus: 1, memoryMiB: 0, assignments: 1 } })], stacking()).machineId).toBe('m1');
    const full = placeReplica([candidate('m1', { ...here(2), reserved: { gpus: 2, memoryMiB: 0, assignments: 2 } })], stacking());
    expect(full).toEqual({ machineId: null, rejected: [{ machineId: 'm1', reason: 'needs 1 GPUs, 0 free' }] });
    expect(
      placeReplica([candidate('m1', { ...here(1), reserved: { gpus: 0, memoryMiB: 100_000, assignments: 1 } })], stacking({ gpus: 0, memoryMiB: 70_000 }))
        .rejected,
    ).toEqual([{ machineId: 'm1', reason: 'needs 70000 MiB, 63118 MiB free' }]);
    expect(placeReplica([candidate('m1', here(4))], stacking()).rejected).toEqual([
      { machineId: 'm1', reason: 'already runs 4 replicas of this deployment (replicasPerMachine 4)' },
    ]);
  });

  it('keeps one replica per machine by default, resources or not', () => {
    expect(placeReplica([candidate('m1', here(1))], request()).rejected).toEqual([{ machineId: 'm1', reason: 'already runs a replica of this deployment' }]);
  });

  it('a set that reserves nothing keeps one replica per machine: nothing would bound how many it stacks', () => {
    expect(placeReplica([candidate('m1', here(1))], request({ gpus: 0, memoryMiB: 0 })).rejected).toEqual([
      { machineId: 'm1', reason: 'already runs a replica of this deployment' },
    ]);
    expect(placeReplica([candidate('m1', here(1, 'other'))], request({ gpus: 0, memoryMiB: 0 })).machineId).toBe('m1');
  });

  it('spreads first: fewer replicas of the same set beats fewer assignments, warmth and free memory', () => {
    const crowded = candidate('a', { ...here(1), warmModels: ['chat'], reserved: { gpus: 1, memoryMiB: 0, assignments: 1 } });
    const busy = candidate('b', { reserved: { gpus: 1, memoryMiB: 0, assignments: 1 }, deploymentIds: new Set(['x']), replicaCounts: new Map([['x', 1]]) });
    expect(placeReplica([crowded, busy], request()).machineId).toBe('b');
    expect(placeReplica([candidate('a', here(2)), candidate('b', here(1))], request({ replicasPerMachine: 3 })).machineId).toBe('b');
  });

  it("the reconciler stacks a set's replicas once every machine runs one, and stops where the GPUs run out", () => {
    const machines = ['m1', 'm2'].map((id) => observedMachine(id, {}, H100x2));
    const actions = reconcile({ deployments: [desiredDeployment({ replicas: 5, gpus: 1, memoryMiB: 0, replicasPerMachine: 4 })], machines, assignments: [] });
    expect(actions.filter((a) => a.type === 'assign').map((a) => a.type === 'assign' && a.machineId)).toEqual(['m1', 'm2', 'm1', 'm2']);
    expect(actions.at(-1)).toEqual({
      type: 'pending',
      deploymentId: 'dep_a',
      missing: 1,
      rejected: [
        { machineId: 'm1', reason: 'needs 1 GPUs, 0 free' },
        { machineId: 'm2', reason: 'needs 1 GPUs, 0 free' },
      ],
    });
  });

  it('counts the replicas already there, outdated ones reserving what their own spec says', () => {
    const machines = [observedMachine('m1', {}, H100x2)];
    // The outdated replica still holds its 2 GPUs (its spec), not what the set asks for now: nothing fits beside it.
    const assignments = [currentAssignment('a1', 'm1', { templateHash: 'T0', resources: { gpus: 2, memoryMiB: 0 } })];
    expect(reconcile({ deployments: [desiredDeployment({ replicas: 1, gpus: 1, memoryMiB: 0 })], machines, assignments })).toEqual([
      { type: 'pending', deploymentId: 'dep_a', missing: 1, rejected: [{ machineId: 'm1', reason: 'needs 1 GPUs, 0 free' }] },
    ]);
  });
});

describe('policy rules and cached versions', () => {
  it('a policy rule names itself in the reason, after the selector', () => {
    const constraints: PlacementConstraint[] = [
      { rule: 'data class pii', labels: { secure: 'yes' } },
      { rule: 'licence LicenseRef-llama3', labels: { research: 'yes' } },
    ];
    const machines = [
      candidate('m1', { labels: {} }),
      candidate('m2', { labels: { zone: 'a' } }),
      candidate('m3', { labels: { zone: 'a', secure: 'yes' } }),
      candidate('m4', { labels: { zone: 'a', secure: 'yes', research: 'yes' } }),
    ];
    expect(placeReplica(machines, request({ selector: { zone: 'a' }, constraints }))).toEqual({
      machineId: 'm4',
      rejected: [
        { machineId: 'm1', reason: 'label zone=a not present' },
        { machineId: 'm2', reason: 'data class pii needs label secure=yes' },
        { machineId: 'm3', reason: 'licence LicenseRef-llama3 needs label research=yes' },
      ],
    });
  });

  it('a machine with the version cached scores like one where the model is warm', () => {
    const cached = candidate('b', { cachedVersions: ['mv_1'] });
    expect(placeReplica([candidate('a'), cached], request({ versionId: 'mv_1' })).machineId).toBe('b');
    expect(placeReplica([candidate('a'), cached], request({ versionId: 'mv_2' })).machineId).toBe('a');
    expect(placeReplica([candidate('a', { warmModels: ['chat'] }), cached], request({ versionId: 'mv_1' })).machineId).toBe('a');
    // Spreading and fewer assignments still come first.
    expect(placeReplica([candidate('a'), { ...cached, reserved: { gpus: 0, memoryMiB: 0, assignments: 1 } }], request({ versionId: 'mv_1' })).machineId).toBe(
      'a',
    );
  });
});
