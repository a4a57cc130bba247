import { describe, expect, it } from 'vitest';
import { reconcile, type CurrentAssignment } from '../../functions/core/fleet/reconcile.js';
import { assignmentSpec } from '../../functions/controller/driver.js';
import { placeReplica, type CandidateMachine } from '../../functions/core/scheduler/place.js';
import { buildFleetSnapshot, type FleetRows } from '../../functions/core/fleet/snapshot.js';
import { deploymentStatus } from '../../functions/services/deployments.js';
import { EMPTY_REGISTRY } from '../../functions/core/registry/resolve.js';
import type { deployments } from '../../functions/store/schema/index.js';
import { planSupervision, type ManagedView } from '../../agent/supervisor/plan.js';
import type { RestartPolicy } from '../../shared/contracts/desired.js';
import { TEST_INVENTORY, testGpu } from '../helpers/machine.js';
import { currentAssignment, deploymentRow as sharedDeploymentRow, desiredDeployment, observedMachine } from '../helpers/reconcile-fixtures.js';

const machine = observedMachine;
const deployment = desiredDeployment;
const asg = (id: string, machineId: string, extra: Partial<CurrentAssignment> = {}) => currentAssignment(id, machineId, { available: false, ...extra });
const EXITED = 'runtime process exited after 5 restarts';

describe('scheduler: machines where the replica failed for good', () => {
  const candidate = (id: string, failures: Array<[string, string]> = []): CandidateMachine => ({
    ...machine(id),
    reserved: { gpus: 0, memoryMiB: 0, assignments: 0 },
    deploymentIds: new Set(),
    replicaFailures: new Map(failures),
  });
  const request = { deploymentId: 'dep_a', model: 'chat', selector: {}, gpus: 0, memoryMiB: 1 };

  it('rejects a marked machine for that deployment only, and says why', () => {
    const decision = placeReplica([candidate('m1', [['dep_a', EXITED]]), candidate('m2')], request);
    expect(decision).toEqual({ machineId: 'm2', rejected: [{ machineId: 'm1', reason: `replica failed here: ${EXITED}` }] });
    expect(placeReplica([candidate('m1', [['dep_other', EXITED]])], request).machineId).toBe('m1');
  });

  it('a machine that is down, cordoned or draining says that first: clearing the mark would not help there', () => {
    const marked = candidate('m1', [['dep_a', EXITED]]);
    expect(placeReplica([{ ...marked, liveness: 'down' }], request).rejected).toEqual([{ machineId: 'm1', reason: 'machine is down' }]);
    expect(placeReplica([{ ...marked, cordoned: true }], request).rejected).toEqual([{ machineId: 'm1', reason: 'machine is cordoned' }]);
    // The mark comes before what else might rule the machine out for this deployment.
    expect(placeReplica([{ ...marked, deploymentIds: new Set(['dep_a']), labels: {} }], { ...request, selector: { gpu: 'h100' } }).rejected).toEqual([
      { machineId: 'm1', reason: `replica failed here: ${EXITED}` },
    ]);
  });
});

describe('reconcile: a replica that failed for good is replaced elsewhere', () => {
  it('retires it with its reason and places the replacement on another machine, in one pass', () => {
    const actions = reconcile({ deployments: [deployment()], machines: [machine('m1'), machine('m2')], assignments: [asg('a1', 'm1', { failure: EXITED })] });
    expect(actions).toEqual([
      { type: 'fail', assignmentId: 'a1', deploymentId: 'dep_a', machineId: 'm1', reason: EXITED },
      { type: 'assign', deploymentId: 'dep_a', machineId: 'm2' },
    ]);
  });

  it('leaves a failed replica that still has restarts left alone', () => {
    expect(reconcile({ deployments: [deployment()], machines: [machine('m1'), machine('m2')], assignments: [asg('a1', 'm1')] })).toEqual([]);
  });

  it('with nowhere else to go: retired all the same, and the replacement is unplaceable with every reason', () => {
    const actions = reconcile({
      deployments: [deployment()],
      machines: [machine('m1'), machine('m2', { cordoned: true })],
      assignments: [asg('a1', 'm1', { failure: EXITED })],
    });
    expect(actions).toEqual([
      { type: 'fail', assignmentId: 'a1', deploymentId: 'dep_a', machineId: 'm1', reason: EXITED },
      {
        type: 'pending',
        deploymentId: 'dep_a',
        missing: 1,
        rejected: [
          { machineId: 'm1', reason: `replica failed here: ${EXITED}` },
          { machineId: 'm2', reason: 'machine is cordoned' },
        ],
      },
    ]);
  });

  it('a replica that fails on every machine ends unplaceable, and stays so: no loop', () => {
    const machines = (marks: string[]) =>
      ['m1', 'm2'].map((id) => machine(id, { replicaFailures: new Map(marks.includes(id) ? [['dep_a', `broken on ${id}`]] : []) }));
    // Pass 1: it failed on m1; m2 gets the replacement.
    expect(
      reconcile({ deployments: [deployment()], machines: machines([]), assignments: [asg('a1', 'm1', { failure: 'broken on m1' })] }).map((a) => a.type),
    ).toEqual(['fail', 'assign']);
    // Pass 2: the replacement failed on m2 as well; m1 is marked since pass 1.
    const second = reconcile({ deployments: [deployment()], machines: machines(['m1']), assignments: [asg('a2', 'm2', { failure: 'broken on m2' })] });
    expect(second).toEqual([
      { type: 'fail', assignmentId: 'a2', deploymentId: 'dep_a', machineId: 'm2', reason: 'broken on m2' },
      {
        type: 'pending',
        deploymentId: 'dep_a',
        missing: 1,
        rejected: [
          { machineId: 'm1', reason: 'replica failed here: broken on m1' },
          { machineId: 'm2', reason: 'replica failed here: broken on m2' },
        ],
      },
    ]);
    // Every later pass: the same answer, nothing placed.
    const later = reconcile({ deployments: [deployment()], machines: machines(['m1', 'm2']), assignments: [] });
    expect(later).toEqual([second[1]]);
    // Once an operator clears m1, the replica goes there again.
    expect(reconcile({ deployments: [deployment()], machines: machines(['m2']), assignments: [] })).toEqual([
      { type: 'assign', deploymentId: 'dep_a', machineId: 'm1' },
    ]);
  });

  it('replaces only what failed: the serving replicas of the deployment stay, and only the lost one is replaced', () => {
    const assignments = [asg('a1', 'm1', { available: true }), asg('a2', 'm2', { failure: EXITED }), asg('a3', 'm3', { available: true })];
    const actions = reconcile({ deployments: [deployment({ replicas: 3 })], machines: ['m1', 'm2', 'm3', 'm4'].map((id) => machine(id)), assignments });
    expect(actions).toEqual([
      { type: 'fail', assignmentId: 'a2', deploymentId: 'dep_a', machineId: 'm2', reason: EXITED },
      { type: 'assign', deploymentId: 'dep_a', machineId: 'm4' },
    ]);
  });

  it('a lost replica is not updated in place by a generation bump', () => {
    const actions = reconcile({
      deployments: [deployment({ generation: 2 })],
      machines: [machine('m1'), machine('m2')],
      assignments: [asg('a1', 'm1', { failure: EXITED })],
    });
    expect(actions.map((a) => a.type)).toEqual(['fail', 'assign']);
  });

  it('its resources stay reserved in the pass that retires it: its node has not stopped it yet', () => {
    const gpuBox = machine('m1', {
      inventory: {
        ...TEST_INVENTORY,
        gpus: [testGpu(0)],
      },
    });
    const other = deployment({ id: 'dep_b', gpus: 1, memoryMiB: 0 });
    const actions = reconcile({
      deployments: [deployment({ gpus: 1, memoryMiB: 0 }), other],
      machines: [gpuBox],
      assignments: [asg('a1', 'm1', { failure: EXITED })],
    });
    expect(actions).toEqual([
      { type: 'fail', assignmentId: 'a1', deploymentId: 'dep_a', machineId: 'm1', reason: EXITED },
      { type: 'pending', deploymentId: 'dep_a', missing: 1, rejected: [{ machineId: 'm1', reason: `replica failed here: ${EXITED}` }] },
      { type: 'pending', deploymentId: 'dep_b', missing: 1, rejected: [{ machineId: 'm1', reason: 'needs 1 GPUs, 0 free' }] },
    ]);
  });

  it('an outdated replica that failed is left to the rollout; deleted deployments and revoked machines keep their reasons', () => {
    // Not marked: the new template may start where the old one failed.
    const rolling = reconcile({
      deployments: [deployment({ templateHash: 'T2', generation: 2 })],
      machines: [machine('m1')],
      assignments: [asg('a1', 'm1', { failure: EXITED })],
    });
    expect(rolling).toEqual([
      { type: 'unassign', assignmentId: 'a1', deploymentId: 'dep_a', machineId: 'm1', reason: 'rolled out' },
      { type: 'assign', deploymentId: 'dep_a', machineId: 'm1' },
    ]);
    expect(reconcile({ deployments: [deployment({ deleted: true })], machines: [machine('m1')], assignments: [asg('a1', 'm1', { failure: EXITED })] })).toEqual(
      [{ type: 'unassign', assignmentId: 'a1', deploymentId: 'dep_a', machineId: 'm1', reason: 'deployment deleted' }],
    );
    expect(
      reconcile({
        deployments: [deployment()],
        machines: [machine('m1', { liveness: 'revoked' }), machine('m2')],
        assignments: [asg('a1', 'm1', { failure: EXITED })],
      }),
    ).toEqual([
      { type: 'unassign', assignmentId: 'a1', deploymentId: 'dep_a', machineId: 'm1', reason: 'machine revoked' },
      { type: 'assign', deploymentId: 'dep_a', machineId: 'm2' },
    ]);
  });

  it('a mark keeps only its own deployment off the machine', () => {
    const marked = machine('m1', { replicaFailures: new Map([['dep_a', EXITED]]) });
    const actions = reconcile({ deployments: [deployment(), deployment({ id: 'dep_b' })], machines: [marked], assignments: [] });
    expect(actions).toEqual([
      { type: 'pending', deploymentId: 'dep_a', missing: 1, rejected: [{ machineId: 'm1', reason: `replica failed here: ${EXITED}` }] },
      { type: 'assign', deploymentId: 'dep_b', machineId: 'm1' },
    ]);
  });
});

// ---------------------------------------------------------------------------------------------------------------
// The read model: failed for good is derived from the report and the assignment's restart policy, the way the
// agent decides not to restart.

type DeploymentRow = typeof deployments.$inferSelect;

const now = new Date('2026-12-01T00:00:00Z');
const ago = (ms: number) => new Date(now.getTime() - ms);
const config = { heartbeatIntervalMs: 20_000, machineLifetimeMs: 60_000, runtimeTtlMs: 60_000, runtimeGraceMs: 15_000, reconcileIntervalMs: 5_000 };
const policy: RestartPolicy = { mode: 'on-failure', maxRestarts: 2, backoffMs: 100 };

/** The shared row, aged an hour and under this file's restart policy. */
const deploymentRow = (extra: Partial<DeploymentRow> = {}): DeploymentRow =>
  sharedDeploymentRow({ restartPolicy: policy, createdAt: ago(3_600_000), updatedAt: ago(3_600_000), ...extra });

const fleetMachine = (id: string, name: string): FleetRows['machines'][number] => ({
  id,
  workspaceId: 'ws_1',
  name,
  labels: {},
  inventory: TEST_INVENTORY,
  createdAt: ago(3_600_000),
  revokedAt: null,
  cordoned: false,
  draining: false,
  lastHeartbeatAt: ago(1_000),
  reportedStatus: 'ready',
  warmModels: [],
  reportedGen: 3,
  desiredGen: 3,
  desiredExpiresAt: new Date(now.getTime() + 60_000),
});

type Replica = { id: string; machineId: string; state: string; restarts?: number; message?: string | null; row?: DeploymentRow };

/** Two machines, gpu-1 and gpu-2, and the replicas `runtimes` says: where, in which state, after how many restarts. */
function fleetRows(runtimes: Replica[], failures: FleetRows['replicaFailures'] = []): FleetRows {
  return {
    now,
    controller: { lastTickAt: ago(1_000), resumedAt: null },
    machines: [fleetMachine('mch_1', 'gpu-1'), fleetMachine('mch_2', 'gpu-2')],
    attached: new Set(['mch_1', 'mch_2']),
    credentialExpiry: new Map(),
    assignments: runtimes.map((r) => ({
      id: r.id,
      machineId: r.machineId,
      deploymentId: 'dep_a',
      spec: assignmentSpec(r.id, r.row ?? deploymentRow(), EMPTY_REGISTRY),
      sinceGen: 1,
    })),
    reports: runtimes.map((r) => ({
      machineId: r.machineId,
      assignmentId: r.id,
      deploymentId: 'dep_a',
      state: r.state,
      gen: 3,
      warm: false,
      activeInvocations: 0,
      queueDepth: 0,
      progress: null,
      restarts: r.restarts ?? 0,
      message: r.message ?? null,
      reportedAt: ago(500),
    })),
    replicaFailures: failures,
  };
}
const fleet = (runtimes: Replica[], failures: FleetRows['replicaFailures'] = []) => buildFleetSnapshot(fleetRows(runtimes, failures), config);

describe('read model: a runtime failed for good', () => {
  const failureOf = (state: string, restarts: number, row = deploymentRow()) =>
    fleet([{ id: 'asg_1', machineId: 'mch_1', state, restarts, message: 'exit code 1', row }]).machines[0]!.runtimes[0]!.failure;

  it('is failed with no restart left by its assignment policy, as the agent judges it', () => {
    expect(failureOf('failed', 0)).toBeNull();
    expect(failureOf('failed', 1)).toBeNull();
    expect(failureOf('failed', 2)).toBe('exit code 1 after 2 restarts');
    expect(failureOf('failed', 1, deploymentRow({ restartPolicy: { ...policy, maxRestarts: 1 } }))).toBe('exit code 1 after 1 restart');
    expect(failureOf('failed', 0, deploymentRow({ restartPolicy: { ...policy, mode: 'never' } }))).toBe('exit code 1 after 0 restarts');
    // A restart in progress, or one that worked, is not a failure whatever the count.
    for (const state of ['preparing', 'starting', 'ready', 'draining', 'stopped']) expect(failureOf(state, 2)).toBeNull();
  });

  it('agrees with the agent, which restarts exactly the failed runtimes the control plane does not count as lost', () => {
    const assignment = assignmentSpec('asg_1', deploymentRow(), EMPTY_REGISTRY);
    for (const mode of ['always', 'on-failure', 'never'] as const) {
      for (let restarts = 0; restarts <= 3; restarts++) {
        const row = deploymentRow({ restartPolicy: { ...policy, mode } });
        const spec = { ...assignment, restartPolicy: row.restartPolicy };
        const managed: ManagedView = { assignment: spec, state: 'failed', busy: false, launching: false, restarts, restartAfter: 0 };
        const restarted = planSupervision({ desired: [spec], managed: [managed], now: 1 }).some((a) => a.type === 'restart');
        expect(restarted, `${mode} after ${restarts}`).toBe(failureOf('failed', restarts, row) === null);
      }
    }
  });

  it('a report without a desired assignment (retiring) is never counted as lost', () => {
    const rows = fleetRows([{ id: 'asg_1', machineId: 'mch_1', state: 'failed', restarts: 5 }]);
    expect(buildFleetSnapshot(rows, config).machines[0]!.runtimes[0]!.failure).toBe('failed after 5 restarts');
    expect(buildFleetSnapshot({ ...rows, assignments: [] }, config).machines[0]!.runtimes[0]).toMatchObject({ desired: false, failure: null });
  });

  it('puts each open mark on its machine, oldest first', () => {
    const failure = (machineId: string, assignmentId: string, minutes: number) => ({
      machineId,
      deploymentId: 'dep_a',
      deploymentName: 'chat',
      assignmentId,
      reason: `r-${assignmentId}`,
      failedAt: ago(minutes * 60_000),
      templateHash: 'T1',
    });
    const snapshot = fleet([], [failure('mch_2', 'asg_2', 1), failure('mch_2', 'asg_1', 5), failure('mch_1', 'asg_3', 2)]);
    expect(snapshot.machines[0]!.replicaFailures.map((f) => f.assignmentId)).toEqual(['asg_3']);
    expect(snapshot.machines[1]!.replicaFailures.map((f) => f.assignmentId)).toEqual(['asg_1', 'asg_2']);
    expect(snapshot.machines[1]!.replicaFailures[0]).toEqual({
      deploymentId: 'dep_a',
      deploymentName: 'chat',
      assignmentId: 'asg_1',
      reason: 'r-asg_1',
      failedAt: ago(300_000),
      templateHash: 'T1',
    });
  });
});

describe('deployment status: degraded, and why', () => {
  const status = (snapshot: ReturnType<typeof fleet>, row = deploymentRow()) =>
    deploymentStatus({ deployment: row, workspaceDeployments: [row], snapshot, registry: EMPTY_REGISTRY });
  const current = assignmentSpec('asg_x', deploymentRow(), EMPTY_REGISTRY).templateHash;
  const mark = (machineId: string, templateHash: string | null = current) => ({
    machineId,
    deploymentId: 'dep_a',
    deploymentName: 'chat',
    assignmentId: `asg_${machineId}`,
    reason: 'exit code 1 after 2 restarts',
    failedAt: ago(1_000),
    templateHash,
  });

  it('a mark left by another template keeps nothing off the machine: a fixed spec is tried there again', () => {
    expect(status(fleet([], [mark('mch_1', 'T-old'), mark('mch_2', 'T-old')]))).toMatchObject({ unplaceable: 0, unplaceableReasons: [] });
  });

  it('is not degraded while every replica serves', () => {
    expect(status(fleet([{ id: 'asg_1', machineId: 'mch_1', state: 'ready' }]))).toMatchObject({ ready: 1, degraded: false, degradedReasons: [] });
  });

  it('is not degraded while a new replica merely starts', () => {
    expect(status(fleet([{ id: 'asg_1', machineId: 'mch_1', state: 'starting' }]))).toMatchObject({ ready: 0, degraded: false, degradedReasons: [] });
  });

  it('is degraded while a replica is failed, restarts left or not, and says where and why', () => {
    expect(status(fleet([{ id: 'asg_1', machineId: 'mch_2', state: 'failed', restarts: 1, message: 'exit code 1' }]))).toMatchObject({
      degraded: true,
      degradedReasons: ['replica failed on gpu-2: exit code 1 (1 of 2 restarts used)'],
    });
    expect(status(fleet([{ id: 'asg_1', machineId: 'mch_2', state: 'failed', restarts: 2, message: 'exit code 1' }])).degradedReasons).toContain(
      'replica failed on gpu-2: exit code 1 after 2 restarts',
    );
  });

  it('is degraded while short of ready replicas after a failure, and no longer once the replacement serves', () => {
    const starting = status(fleet([{ id: 'asg_2', machineId: 'mch_2', state: 'starting' }], [mark('mch_1')]));
    expect(starting).toMatchObject({ ready: 0, degraded: true, degradedReasons: ['replica failed on gpu-1: exit code 1 after 2 restarts'] });
    const serving = status(fleet([{ id: 'asg_2', machineId: 'mch_2', state: 'ready' }], [mark('mch_1')]));
    expect(serving).toMatchObject({ ready: 1, degraded: false, degradedReasons: [] });
  });

  it('is degraded when the replica failed everywhere: the marks, and the unplaceable replica with every reason', () => {
    const s = status(fleet([], [mark('mch_1'), mark('mch_2')]));
    expect(s).toMatchObject({ ready: 0, unplaceable: 1, degraded: true });
    expect(s.degradedReasons).toEqual([
      'replica failed on gpu-1: exit code 1 after 2 restarts',
      'replica failed on gpu-2: exit code 1 after 2 restarts',
      '1 replica cannot be placed: gpu-1: replica failed here: exit code 1 after 2 restarts; gpu-2: replica failed here: exit code 1 after 2 restarts',
    ]);
  });

  it('is degraded when short of replicas it cannot place, failures or not', () => {
    const s = status(fleet([]), deploymentRow({ memoryMiB: 1_000_000 }));
    expect(s.degradedReasons).toEqual(['1 replica cannot be placed: gpu-1: needs 1000000 MiB, 131072 MiB free; gpu-2: needs 1000000 MiB, 131072 MiB free']);
    expect(status({ now, machines: [] }).degradedReasons).toEqual(['1 replica cannot be placed: no machine in this workspace']);
  });

  it("counts only the current template: a failed outdated replica is the rollout's to replace", () => {
    const old = deploymentRow({ model: 'chat-old' });
    const s = status(
      fleet([
        { id: 'asg_1', machineId: 'mch_1', state: 'failed', restarts: 2, row: old },
        { id: 'asg_2', machineId: 'mch_2', state: 'ready' },
      ]),
    );
    expect(s).toMatchObject({ ready: 1, degraded: false, degradedReasons: [] });
  });
});
