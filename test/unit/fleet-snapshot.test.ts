import { describe, expect, it } from 'vitest';
import { buildFleetSnapshot, machineResources, type FleetRows } from '../../functions/core/fleet/snapshot.js';
import { templateHash } from '../../functions/core/registry/template.js';
import type { Assignment } from '../../shared/contracts/desired.js';
import { TEST_INVENTORY } from '../helpers/machine.js';

const config = { heartbeatIntervalMs: 20_000, machineLifetimeMs: 60_000, runtimeTtlMs: 60_000, runtimeGraceMs: 15_000, reconcileIntervalMs: 5_000 };
const now = new Date('2026-12-01T00:00:00Z');
const ago = (ms: number) => new Date(now.getTime() - ms);

const spec = (assignmentId: string, model = 'm'): Assignment => {
  const fields = {
    model,
    runtime: { kind: 'simulated' as const, model, ttftMs: 1, tokensPerSecond: 1, loadMs: 1, memoryMiB: 1, failureRate: 0 },
    artifact: null,
    resources: { gpus: 1, memoryMiB: 100 },
  };
  return {
    assignmentId,
    deploymentId: 'dep_a',
    deploymentName: 'a',
    deploymentGeneration: 1,
    restartPolicy: { mode: 'on-failure', maxRestarts: 5, backoffMs: 1000 },
    startup: { timeoutMs: 60_000, probeIntervalMs: 1_000, failureThreshold: 3 },
    ...fields,
    templateHash: templateHash(fields),
  };
};

const rows = (
  extra: Partial<FleetRows> = {},
  machine: Partial<FleetRows['machines'][number]> = {},
  report: Partial<FleetRows['reports'][number]> = {},
): FleetRows => ({
  now,
  controller: { lastTickAt: null, resumedAt: null },
  machines: [
    {
      id: 'mch_1',
      workspaceId: 'ws_1',
      name: 'n1',
      labels: {},
      inventory: TEST_INVENTORY,
      createdAt: ago(3_600_000),
      revokedAt: null,
      cordoned: false,
      draining: false,
      lastHeartbeatAt: ago(1_000),
      reportedStatus: 'ready',
      warmModels: ['m'],
      reportedGen: 3,
      desiredGen: 3,
      desiredExpiresAt: new Date(now.getTime() + 60_000),
      ...machine,
    },
  ],
  attached: new Set(['mch_1']),
  credentialExpiry: new Map(),
  assignments: [{ id: 'asg_1', machineId: 'mch_1', deploymentId: 'dep_a', spec: spec('asg_1'), sinceGen: 2 }],
  reports: [
    {
      machineId: 'mch_1',
      assignmentId: 'asg_1',
      deploymentId: 'dep_a',
      state: 'ready',
      gen: 3,
      warm: true,
      activeInvocations: 2,
      queueDepth: 1,
      progress: null,
      restarts: 0,
      message: null,
      reportedAt: ago(1_000),
      ...report,
    },
  ],
  replicaFailures: [],
  ...extra,
});

const runtime = (r: FleetRows) => buildFleetSnapshot(r, config).machines[0]!.runtimes[0]!;

describe('fleet snapshot', () => {
  it('joins a desired assignment with its report: routable, warm, the reported load and the reserved resources', () => {
    const snapshot = buildFleetSnapshot(rows(), config);
    const machine = snapshot.machines[0]!;
    expect(machine).toMatchObject({
      liveness: 'ready',
      reportedStatus: 'ready',
      streamAttached: true,
      warmModels: ['m'],
      reserved: { gpus: 1, memoryMiB: 100, assignments: 1 },
      drained: false,
    });
    expect(machine.runtimes[0]).toMatchObject({
      desired: true,
      state: 'ready',
      routable: true,
      warm: true,
      activeInvocations: 2,
      queueDepth: 1,
      templateHash: spec('asg_1').templateHash,
    });
  });

  it.each([
    ['the stream is detached', rows({ attached: new Set() })],
    ['the report predates the assignment', rows({}, {}, { gen: 1 })],
    ['the runtime is starting', rows({}, {}, { state: 'starting' })],
    ['the agent is shutting down', rows({}, { reportedStatus: 'draining' })],
    ['the signed desired state expired', rows({}, { desiredExpiresAt: ago(1) })],
    ['the machine is stale', rows({}, { lastHeartbeatAt: ago(40_000) })],
    ['the machine is revoked', rows({}, { revokedAt: ago(1) })],
  ])('is not routable when %s', (_why, input) => {
    expect(runtime(input).routable).toBe(false);
  });

  it('keeps serving from a cordoned or draining machine', () => {
    expect(runtime(rows({}, { cordoned: true })).routable).toBe(true);
    expect(runtime(rows({}, { cordoned: true, draining: true })).routable).toBe(true);
  });

  it('a runtime still reported after its assignment left is retiring: not desired, not routable, holds nothing', () => {
    const snapshot = buildFleetSnapshot(rows({ assignments: [] }, { draining: true }, { state: 'draining' }), config);
    const machine = snapshot.machines[0]!;
    expect(machine.runtimes[0]).toMatchObject({ desired: false, routable: false, templateHash: null, deploymentId: 'dep_a' });
    expect(machine.reserved).toEqual({ gpus: 0, memoryMiB: 0, cores: 0, assignments: 0 });
    expect(machine.drained).toBe(false);
  });

  it('a draining machine with nothing left is drained', () => {
    expect(buildFleetSnapshot(rows({ assignments: [], reports: [] }, { draining: true }), config).machines[0]!.drained).toBe(true);
  });

  it('an assignment not reported yet is preparing on a ready machine and down on a lost one', () => {
    expect(runtime(rows({ reports: [] })).state).toBe('preparing');
    expect(runtime(rows({ reports: [] }, { lastHeartbeatAt: ago(120_000) })).state).toBe('down');
  });

  it("warm models are the agent's word only while its heartbeat is fresh", () => {
    expect(buildFleetSnapshot(rows({}, { lastHeartbeatAt: ago(120_000) }), config).machines[0]!.warmModels).toEqual([]);
  });

  it('after an interruption longer than a lifetime, a report from before it is lost sight: stale, never ready, never down', () => {
    // The controller last ticked 10 minutes ago; the machine reported just before that.
    const interrupted = rows({ controller: { lastTickAt: ago(600_000), resumedAt: null } }, { lastHeartbeatAt: ago(601_000) }, { reportedAt: ago(601_000) });
    const machine = buildFleetSnapshot(interrupted, config).machines[0]!;
    expect(machine.liveness).toBe('stale');
    expect(machine.runtimes[0]).toMatchObject({ state: 'stale', routable: false });
    // A tick gap within a lifetime is no interruption: the report's own age decides.
    expect(buildFleetSnapshot(rows({ controller: { lastTickAt: ago(30_000), resumedAt: null } }), config).machines[0]!.liveness).toBe('ready');
    // Once the recorded resumption is a lifetime old, a machine that never reported again is down.
    const later = rows({ controller: { lastTickAt: ago(1_000), resumedAt: ago(61_000) } }, { lastHeartbeatAt: ago(700_000) }, { reportedAt: ago(700_000) });
    expect(buildFleetSnapshot(later, config).machines[0]!.liveness).toBe('down');
  });

  it('ignores a machine status it does not know', () => {
    expect(buildFleetSnapshot(rows({}, { reportedStatus: 'bogus' }), config).machines[0]!.reportedStatus).toBeNull();
  });
});

describe('template hash', () => {
  it('ignores key order and changes with the model, runtime, artifact or resources', () => {
    const base = spec('a');
    const reordered = { resources: { memoryMiB: 100, gpus: 1 }, artifact: null, runtime: { ...base.runtime }, model: 'm' };
    expect(templateHash(reordered)).toBe(base.templateHash);
    expect(templateHash({ ...reordered, resources: { gpus: 2, memoryMiB: 100 } })).not.toBe(base.templateHash);
    expect(templateHash({ ...reordered, model: 'other' })).not.toBe(base.templateHash);
  });
});

describe("a machine's resources", () => {
  const inventory = { ...TEST_INVENTORY, cpus: 32, memoryTotalMiB: 65_536, gpus: [] };

  it('splits what is reserved between replicas and run workers, and leaves the rest free, as placement counts it', () => {
    const [machine] = buildFleetSnapshot(
      rows(
        {
          workers: [
            { machineId: 'mch_1', gpus: 0, memoryMiB: 1_000, cores: 4 },
            { machineId: 'mch_1', gpus: 0, memoryMiB: 500, cores: 2 },
          ],
        },
        { inventory },
      ),
      config,
    ).machines;
    expect(machineResources(machine!)).toEqual({
      capacity: { gpus: 0, memoryMiB: 65_536, cores: 32 },
      replicas: { gpus: 1, memoryMiB: 100, cores: 0 },
      workers: { gpus: 0, memoryMiB: 1_500, cores: 6 },
      free: { gpus: -1, memoryMiB: 63_936, cores: 26 },
    });
  });

  it('counts nothing reserved on an empty machine: everything is free', () => {
    const [machine] = buildFleetSnapshot(rows({ assignments: [], reports: [] }, { inventory }), config).machines;
    const { capacity, replicas, workers, free } = machineResources(machine!);
    expect(replicas).toEqual({ gpus: 0, memoryMiB: 0, cores: 0 });
    expect(workers).toEqual({ gpus: 0, memoryMiB: 0, cores: 0 });
    expect(free).toEqual(capacity);
  });
});
