import { describe, expect, it } from 'vitest';
import { assignmentSpec } from '../../functions/controller/driver.js';
import { reconcileFleet } from '../../functions/core/fleet/reconcile-fleet.js';
import { replicaSets, type PlacementInputs } from '../../functions/core/fleet/replica-sets.js';
import { catalogOf, EMPTY_CATALOG, resolveSource, type CatalogVersion } from '../../functions/core/fleet/versions.js';
import { replicaSetId, replicaSetOf } from '../../functions/core/fleet/tracks.js';
import { buildFleetSnapshot, type FleetRows } from '../../functions/core/fleet/snapshot.js';
import { templateHash } from '../../functions/core/registry/template.js';
import { EMPTY_REGISTRY } from '../../functions/core/registry/resolve.js';
import { deploymentStatus } from '../../functions/services/deployments.js';
import { WorkspacePolicy } from '../../shared/contracts/placement.js';
import type { Assignment } from '../../shared/contracts/desired.js';
import type { VersionState } from '../../shared/contracts/registry.js';
import { TEST_INVENTORY } from '../helpers/machine.js';
import { deploymentRow } from '../helpers/reconcile-fixtures.js';

const SHA = 'a'.repeat(64);
const version = (id: string, label: string, state: VersionState, licence: string | null = null): CatalogVersion => ({
  id,
  workspaceId: 'ws_1',
  model: 'llama',
  version: label,
  state,
  licence,
  totalBytes: 10,
  files: [{ path: 'model.safetensors', size: 10, sha256: SHA }],
});
const versions = [
  version('mv_1', 'v1', 'stable'),
  version('mv_2', 'v2', 'canary', 'LicenseRef-llama3'),
  version('mv_3', 'v3', 'rolled_back'),
  version('mv_4', 'v4', 'evaluated'),
];
const catalog = (aliasTo = 'mv_1') => catalogOf({ aliases: [{ workspaceId: 'ws_1', name: 'chat-default', versionId: aliasTo }], versions });
const inputs = (extra: Partial<PlacementInputs> = {}): PlacementInputs => ({ registry: EMPTY_REGISTRY, versions: catalog(), policies: new Map(), ...extra });
const aliased = deploymentRow({ source: { kind: 'alias', alias: 'chat-default' } });
const withCanary = (label: string, extra = {}) =>
  deploymentRow({ ...aliased, canary: { version: label, weight: 10, replicas: 2, selector: { gpu: 'h100' } }, selector: { site: 'lab' }, ...extra });

describe('registry sources', () => {
  it("resolves an alias and a version in the deployment's workspace; only an approved version onwards serves", () => {
    const c = catalog();
    expect(resolveSource('ws_1', { kind: 'alias', alias: 'chat-default' }, c)).toMatchObject({ ok: true, version: { id: 'mv_1' } });
    expect(resolveSource('ws_1', { kind: 'version', model: 'llama', version: 'v2' }, c)).toMatchObject({ ok: true, version: { id: 'mv_2' } });
    expect(resolveSource('ws_2', { kind: 'alias', alias: 'chat-default' }, c)).toEqual({ ok: false, reason: 'alias chat-default not found' });
    expect(resolveSource('ws_1', { kind: 'version', model: 'llama', version: 'v9' }, c)).toEqual({ ok: false, reason: 'version llama v9 not found' });
    expect(resolveSource('ws_1', { kind: 'version', model: 'llama', version: 'v3' }, c)).toEqual({
      ok: false,
      reason: 'version llama v3 is rolled_back: only an approved version serves',
    });
    expect(resolveSource('ws_1', { kind: 'version', model: 'llama', version: 'v4' }, c)).toEqual({
      ok: false,
      reason: 'version llama v4 is evaluated: only an approved version serves',
    });
    expect(resolveSource('ws_1', { kind: 'alias', alias: 'chat-default' }, catalog('mv_3'))).toEqual({
      ok: false,
      reason: 'alias chat-default points at llama v3, which is rolled_back: only an approved version serves',
    });
  });
});

describe('replica sets of a deployment', () => {
  it('without a source: one stable set, whose digest is what it was before registry versions existed', () => {
    const [stable, ...rest] = replicaSets(deploymentRow(), inputs({ versions: EMPTY_CATALOG }));
    expect(rest).toEqual([]);
    expect(stable!.desired).toMatchObject({ id: 'dep_a', versionId: null, hold: null, constraints: [], replicas: 1 });
    const { model, runtime, artifact } = stable!.template!.fields;
    expect(stable!.desired.templateHash).toBe(templateHash({ model, runtime, artifact, resources: { gpus: 0, memoryMiB: 64 } }));
    const perGpu = replicaSets(deploymentRow({ gpuMemoryMiB: 40_960 }), inputs())[0]!;
    expect(perGpu.template!.fields.resources).toEqual({ gpus: 0, memoryMiB: 64, gpuMemoryMiB: 40_960 });
    expect(perGpu.desired.templateHash).not.toBe(stable!.desired.templateHash);
  });

  it('an alias resolves to its version: the version id is in the digest (moving the alias rolls it), the file URLs are not', () => {
    const [stable] = replicaSets(aliased, inputs());
    expect(stable!.desired.versionId).toBe('mv_1');
    expect(stable!.template!.fields.version).toEqual({
      versionId: 'mv_1',
      model: 'llama',
      version: 'v1',
      totalBytes: 10,
      files: [{ path: 'model.safetensors', size: 10, sha256: SHA, url: '' }],
      urlsExpireAt: 0,
    });
    const moved = replicaSets(aliased, inputs({ versions: catalog('mv_2') }))[0]!;
    expect(moved.desired.templateHash).not.toBe(stable!.desired.templateHash);
    const fields = stable!.template!.fields;
    const signed = {
      ...fields,
      version: { ...fields.version!, files: fields.version!.files.map((f) => ({ ...f, url: 'https://signed/x' })), urlsExpireAt: 99 },
    };
    expect(templateHash(signed)).toBe(stable!.desired.templateHash);
  });

  it('a source that does not resolve holds the set: nothing new, its replicas kept, and why', () => {
    expect(replicaSets(aliased, inputs({ versions: catalog('mv_3') }))[0]!).toMatchObject({
      template: null,
      desired: { hold: 'alias chat-default points at llama v3, which is rolled_back: only an approved version serves', versionId: null },
    });
  });

  it('a canary is its own set of its own version, on machines matching both selectors', () => {
    const sets = replicaSets(withCanary('v2'), inputs());
    expect(sets.map((s) => [s.track, s.desired.id, s.desired.versionId, s.desired.replicas])).toEqual([
      ['stable', 'dep_a', 'mv_1', 1],
      ['canary', 'dep_a/canary', 'mv_2', 2],
    ]);
    expect(sets[1]!.desired.selector).toEqual({ site: 'lab', gpu: 'h100' });
    expect(sets[1]!.desired.templateHash).not.toBe(sets[0]!.desired.templateHash);
  });

  it('a canary of the stable version is no canary; one that does not resolve is held with why', () => {
    expect(replicaSets(withCanary('v1'), inputs()).map((s) => s.track)).toEqual(['stable']);
    expect(replicaSets(withCanary('v9'), inputs())[1]!.desired).toMatchObject({ id: 'dep_a/canary', hold: 'canary version llama v9 not found' });
    expect(replicaSets(withCanary('v3'), inputs())[1]!.desired.hold).toBe('canary version llama v3 is rolled_back: only an approved version serves');
    // Without its source the canary's model is unknown: held with the source's reason.
    expect(replicaSets(withCanary('v2'), inputs({ versions: EMPTY_CATALOG })).map((s) => s.desired.hold)).toEqual([
      'alias chat-default not found',
      'alias chat-default not found',
    ]);
  });

  it('asleep: both sets want no replica; deleted: the canary set goes and the stable one is retired', () => {
    expect(replicaSets(withCanary('v2', { asleepSince: new Date() }), inputs()).map((s) => s.desired.replicas)).toEqual([0, 0]);
    expect(replicaSets(withCanary('v2', { deletedAt: new Date() }), inputs()).map((s) => [s.track, s.desired.deleted])).toEqual([['stable', true]]);
  });

  it('the workspace policy: an unlisted data class holds both sets; a licence rule constrains only the version under it', () => {
    const policy = WorkspacePolicy.parse({
      dataClasses: { pii: { machineSelector: { secure: 'yes' } } },
      licences: { 'LicenseRef-llama3': { machineSelector: { research: 'yes' } } },
    });
    const policies = new Map([['ws_1', policy]]);
    expect(replicaSets(withCanary('v2', { dataClass: 'medical' }), inputs({ policies })).map((s) => s.desired.hold)).toEqual([
      "data class medical is not in the workspace's policy",
      "data class medical is not in the workspace's policy",
    ]);
    const [stable, canary] = replicaSets(withCanary('v2', { dataClass: 'pii' }), inputs({ policies }));
    expect(stable!.desired.constraints).toEqual([{ rule: 'data class pii', labels: { secure: 'yes' } }]);
    expect(canary!.desired.constraints).toEqual([
      { rule: 'data class pii', labels: { secure: 'yes' } },
      { rule: 'licence LicenseRef-llama3', labels: { research: 'yes' } },
    ]);
  });

  it('set ids round-trip', () => {
    expect(replicaSetOf(replicaSetId('dep_x', 'stable'))).toEqual({ deploymentId: 'dep_x', track: 'stable' });
    expect(replicaSetOf(replicaSetId('dep_x', 'canary'))).toEqual({ deploymentId: 'dep_x', track: 'canary' });
  });
});

// ---------------------------------------------------------------------------------------------------------------
// The sets through the read model, the fleet reconciler and the status.

const now = new Date('2026-12-02T00:00:00Z');
const config = { heartbeatIntervalMs: 20_000, machineLifetimeMs: 60_000, runtimeTtlMs: 60_000, runtimeGraceMs: 15_000, reconcileIntervalMs: 5_000 };
const machineRow = (id: string, labels: Record<string, string>): FleetRows['machines'][number] => ({
  id,
  workspaceId: 'ws_1',
  name: id,
  labels,
  inventory: TEST_INVENTORY,
  createdAt: now,
  revokedAt: null,
  cordoned: false,
  draining: false,
  lastHeartbeatAt: now,
  reportedStatus: 'ready',
  warmModels: [],
  cachedVersions: [],
  reportedGen: 1,
  desiredGen: 1,
  desiredExpiresAt: new Date(now.getTime() + 60_000),
});
/** Machines `lab-1` (site=lab) and `lab-h100` (site=lab, gpu=h100) with the given replicas, all serving. */
function snapshot(replicas: Array<{ machineId: string; spec: Assignment }>) {
  return buildFleetSnapshot(
    {
      now,
      controller: { lastTickAt: now, resumedAt: null },
      machines: [machineRow('lab-1', { site: 'lab' }), machineRow('lab-h100', { site: 'lab', gpu: 'h100' })],
      attached: new Set(['lab-1', 'lab-h100']),
      credentialExpiry: new Map(),
      assignments: replicas.map((r) => ({ id: r.spec.assignmentId, machineId: r.machineId, deploymentId: r.spec.deploymentId, spec: r.spec, sinceGen: 1 })),
      reports: replicas.map((r) => ({
        machineId: r.machineId,
        assignmentId: r.spec.assignmentId,
        deploymentId: r.spec.deploymentId,
        state: 'ready',
        gen: 1,
        warm: false,
        activeInvocations: 0,
        queueDepth: 0,
        progress: null,
        restarts: 0,
        message: null,
        reportedAt: now,
      })),
      replicaFailures: [],
    },
    config,
  );
}

describe('tracks through the fleet reconciler and the status', () => {
  const row = withCanary('v2', { canary: { version: 'v2', weight: 10, replicas: 1, selector: { gpu: 'h100' } } });
  const specOf = (id: string, track: 'stable' | 'canary', r = row) =>
    assignmentSpec(id, r, EMPTY_REGISTRY, replicaSets(r, inputs()).find((s) => s.track === track)!);

  it('the spec carries its track and version; the read model reads them back', () => {
    const spec = specOf('asg_c', 'canary');
    expect(spec).toMatchObject({ track: 'canary', version: { versionId: 'mv_2' }, templateHash: replicaSets(row, inputs())[1]!.desired.templateHash });
    expect(assignmentSpec('asg_s', deploymentRow(), EMPTY_REGISTRY)).toMatchObject({ track: 'stable' });
    expect(assignmentSpec('asg_s', deploymentRow(), EMPTY_REGISTRY).version).toBeUndefined();
    expect(snapshot([{ machineId: 'lab-h100', spec }]).machines[1]!.runtimes[0]).toMatchObject({ track: 'canary', versionId: 'mv_2' });
  });

  it('each set is placed on its own: the canary only where both selectors match', () => {
    const actions = reconcileFleet(snapshot([]), [row], inputs());
    expect(actions).toEqual([
      { type: 'assign', deploymentId: 'dep_a', machineId: 'lab-1' },
      { type: 'assign', deploymentId: 'dep_a/canary', machineId: 'lab-h100' },
    ]);
  });

  it('a running canary is counted apart; removing the canary retires its replicas, the stable set untouched', () => {
    const fleet = snapshot([
      { machineId: 'lab-1', spec: specOf('asg_s', 'stable') },
      { machineId: 'lab-h100', spec: specOf('asg_c', 'canary') },
    ]);
    expect(reconcileFleet(fleet, [row], inputs())).toEqual([]);
    const status = deploymentStatus({ deployment: row, workspaceDeployments: [row], snapshot: fleet, registry: EMPTY_REGISTRY, versions: catalog() });
    expect(status).toMatchObject({
      desired: 1,
      ready: 1,
      canary: { version: 'v2', desired: 1, ready: 1, starting: 0 },
      asleep: false,
      degraded: false,
      rollout: { state: 'complete', updated: 2 },
    });
    expect(status.replicas.map((r) => [r.assignmentId, r.track, r.current])).toEqual([
      ['asg_s', 'stable', true],
      ['asg_c', 'canary', true],
    ]);
    const removed = { ...row, canary: null };
    expect(reconcileFleet(fleet, [removed], inputs())).toEqual([
      { type: 'unassign', assignmentId: 'asg_c', deploymentId: 'dep_a/canary', machineId: 'lab-h100', reason: 'deployment deleted' },
    ]);
  });

  it('moving the alias rolls the stable set and leaves the canary alone', () => {
    const fleet = snapshot([
      { machineId: 'lab-1', spec: specOf('asg_s', 'stable') },
      { machineId: 'lab-h100', spec: specOf('asg_c', 'canary') },
    ]);
    const promoted = catalogOf({
      aliases: [{ workspaceId: 'ws_1', name: 'chat-default', versionId: 'mv_4' }],
      versions: [...versions.slice(0, 3), version('mv_4', 'v4', 'approved')],
    });
    // The new stable replica may start beside the outdated one it replaces.
    expect(reconcileFleet(fleet, [row], inputs({ versions: promoted }))).toEqual([{ type: 'assign', deploymentId: 'dep_a', machineId: 'lab-1' }]);
  });

  it('asleep: both sets are retired and the status says so', () => {
    const asleep = { ...row, asleepSince: now };
    const fleet = snapshot([
      { machineId: 'lab-1', spec: specOf('asg_s', 'stable') },
      { machineId: 'lab-h100', spec: specOf('asg_c', 'canary') },
    ]);
    expect(reconcileFleet(fleet, [asleep], inputs()).map((a) => a.type === 'unassign' && [a.deploymentId, a.reason])).toEqual([
      ['dep_a', 'scaled down'],
      ['dep_a/canary', 'scaled down'],
    ]);
    expect(
      deploymentStatus({ deployment: asleep, workspaceDeployments: [asleep], snapshot: snapshot([]), registry: EMPTY_REGISTRY, versions: catalog() }),
    ).toMatchObject({
      desired: 0,
      asleep: true,
      canary: { desired: 0 },
      degraded: false,
      rollout: { state: 'complete' },
    });
  });

  it('the status names what holds a set, which set, and the quota', () => {
    const fleet = snapshot([{ machineId: 'lab-1', spec: specOf('asg_s', 'stable') }]);
    const broken = { ...row, canary: { version: 'v9', weight: 10, replicas: 1, selector: {} } };
    expect(
      deploymentStatus({ deployment: broken, workspaceDeployments: [broken], snapshot: fleet, registry: EMPTY_REGISTRY, versions: catalog() }),
    ).toMatchObject({
      unplaceable: 1,
      degradedReasons: ['canary: 1 replica cannot be placed: canary version llama v9 not found'],
    });
    const rolledBack = deploymentStatus({
      deployment: deploymentRow(aliased),
      workspaceDeployments: [aliased],
      snapshot: fleet,
      registry: EMPTY_REGISTRY,
      versions: catalog('mv_3'),
    });
    expect(rolledBack).toMatchObject({
      ready: 1,
      unplaceable: 0,
      degradedReasons: ['replicas kept as they are: alias chat-default points at llama v3, which is rolled_back: only an approved version serves'],
    });
    const policies = new Map([['ws_1', WorkspacePolicy.parse({ quota: { replicas: 1 } })]]);
    const quota = deploymentStatus({ deployment: row, workspaceDeployments: [row], snapshot: fleet, registry: EMPTY_REGISTRY, versions: catalog(), policies });
    expect(quota).toMatchObject({
      unplaceable: 1,
      unplaceableReasons: [],
      degradedReasons: ['canary: 1 replica cannot be placed: workspace quota: needs 1 replica, 0 of 1 left'],
    });
    const nowhere = { ...row, canary: { version: 'v2', weight: 10, replicas: 1, selector: { gpu: 'b200' } } };
    expect(
      deploymentStatus({ deployment: nowhere, workspaceDeployments: [nowhere], snapshot: fleet, registry: EMPTY_REGISTRY, versions: catalog() })
        .unplaceableReasons,
    ).toEqual([
      { machineId: 'lab-1', machineName: 'lab-1', reason: 'canary: label gpu=b200 not present' },
      { machineId: 'lab-h100', machineName: 'lab-h100', reason: 'canary: label gpu=b200 not present' },
    ]);
  });
});
