import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DeploymentDetail, DeploymentListItem } from '../../shared/contracts/deployment.js';
import type { MachineView } from '../../shared/contracts/machine.js';
import { createApiToken } from '../../functions/services/api-tokens.js';
import { enrollTestMachine, heartbeatBody, type TestMachine } from '../helpers/machine.js';
import { describePg } from '../helpers/pg.js';
import { startTestPlane, type StoreKind, type TestPlane } from '../helpers/plane.js';

/**
 * Deployment status, events and deletion over the management API, with machines driven directly over HTTP
 * (their heartbeats are the only report the control plane gets).
 */
function statusSuite(store: StoreKind) {
  let plane: TestPlane;
  let gpuNode: TestMachine;
  let labNode: TestMachine;
  let viewer: string;
  let seq = 0;

  const spec = (extra: Record<string, unknown> = {}) => ({
    model: 'big-model',
    runtime: { kind: 'simulated', model: 'big-model' },
    replicas: 2,
    selector: { site: 'lab' },
    memoryMiB: 200_000,
    ...extra,
  });
  const put = (name: string, body: unknown, token = plane.adminToken) =>
    fetch(`${plane.url}/api/v1/deployments/${name}`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  const get = async (name: string) => {
    const response = await plane.admin(`/api/v1/deployments/${name}`);
    expect(response.status).toBe(200);
    return (await response.json()) as DeploymentDetail;
  };
  const beat = async (machine: TestMachine) => {
    const response = await machine.request('POST', '/agent/v1/heartbeat', heartbeatBody(machine, ++seq));
    expect(response.status).toBe(200);
  };

  beforeAll(async () => {
    // The machines heartbeat only when a test says so: liveness is slow here so that a loaded CI machine
    // never sees them stale between two steps (this suite is about status, not liveness).
    plane = await startTestPlane({ store, config: { heartbeatIntervalMs: 20_000, machineLifetimeMs: 600_000, runtimeTtlMs: 600_000 } });
    gpuNode = await enrollTestMachine(plane, 'gpu-node', { site: 'lab' });
    labNode = await enrollTestMachine(plane, 'other-site', { site: 'elsewhere' });
    await beat(gpuNode);
    await beat(labNode);
    viewer = (await createApiToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name: 'viewer', role: 'viewer' } })).token;
  });
  afterAll(async () => {
    await plane?.stop();
  });

  it("an unplaceable replica shows the scheduler's reason for every machine", async () => {
    expect((await put('big', spec())).status).toBe(200);
    const { status, events } = await get('big');
    expect(status).toMatchObject({ desired: 2, ready: 0, unplaceable: 2 });
    const reasons = Object.fromEntries(status.unplaceableReasons.map((r) => [r.machineName, r.reason]));
    expect(reasons).toEqual({ 'gpu-node': 'needs 200000 MiB, 131072 MiB free', 'other-site': 'label site=lab not present' });
    expect(events).toEqual([]);
  });

  it('a placeable replica is placed, and the event says where', async () => {
    expect((await put('big', spec({ memoryMiB: 1024, replicas: 1 }))).status).toBe(200);
    const { status, events } = await get('big');
    // Assigned and not reported yet: the node is preparing it.
    expect(status).toMatchObject({ desired: 1, ready: 0, starting: 1, unplaceable: 0, unplaceableReasons: [] });
    expect(status.replicas).toHaveLength(1);
    expect(status.replicas[0]).toMatchObject({ machineName: 'gpu-node', state: 'preparing', current: true, desired: true, routable: false });
    expect(events.map((e) => [e.type, e.machineId])).toEqual([['placed', gpuNode.machineId]]);
    // The list carries each deployment's counts as the detail has them, so a fleet view is one request.
    expect((await put('small', spec({ memoryMiB: 200_000, replicas: 1 }))).status).toBe(200);
    const list = (await (await plane.admin('/api/v1/deployments')).json()) as { data: DeploymentListItem[] };
    expect(list.data.map((d) => [d.name, d.status])).toEqual([
      ['big', { desired: 1, ready: 0, starting: 1, failed: 0, unplaceable: 0, degraded: false, asleep: false }],
      ['small', { desired: 1, ready: 0, starting: 0, failed: 0, unplaceable: 1, degraded: true, asleep: false }],
    ]);
    expect((await get('small')).status).toMatchObject(list.data[1]!.status);
    expect((await plane.admin('/api/v1/deployments/small', { method: 'DELETE' })).status).toBe(200);
    // The machine view counts it as placement does: reserved by replicas, the rest free.
    const machine = (await (await plane.admin(`/api/v1/machines/${gpuNode.machineId}`)).json()) as MachineView;
    const { capacity, replicas, workers, free } = machine.resources;
    expect(replicas).toMatchObject({ memoryMiB: 1024, cores: 0 });
    expect(workers).toEqual({ gpus: 0, memoryMiB: 0, cores: 0 });
    expect(free).toEqual({ gpus: capacity.gpus - replicas.gpus, memoryMiB: capacity.memoryMiB - 1024, cores: capacity.cores });
  });

  it('re-applying with keys in another order keeps the generation', async () => {
    const before = (await get('big')).generation;
    const body = spec({ memoryMiB: 1024, replicas: 1 });
    const reordered = Object.fromEntries(Object.entries(body).reverse());
    expect((await put('big', reordered)).status).toBe(200);
    expect((await get('big')).generation).toBe(before);
  });

  it('answers bad input and weak tokens with the envelope and changes nothing', async () => {
    const before = await get('big');
    const bad = await put('big', { ...spec(), rollout: { maxSurge: 0, maxUnavailable: 0 } });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { code: string } }).error.code).toBe('validation_failed');
    expect((await put('big', { ...spec(), startup: { timeoutMs: 5 } })).status).toBe(400);
    expect((await put('big', spec(), viewer)).status).toBe(403);
    const forbidden = await fetch(`${plane.url}/api/v1/deployments/big`, { method: 'DELETE', headers: { authorization: `Bearer ${viewer}` } });
    expect(forbidden.status).toBe(403);
    expect((await fetch(`${plane.url}/api/v1/deployments/big`)).status).toBe(401);
    expect((await plane.admin('/api/v1/deployments/NOT_A_NAME')).status).toBe(400);
    expect((await plane.admin('/api/v1/deployments/nothing-here')).status).toBe(404);
    expect((await plane.admin('/api/v1/deployments/nothing-here', { method: 'DELETE' })).status).toBe(404);
    const after = await get('big');
    expect(after.generation).toBe(before.generation);
    expect(after.status.replicas.map((r) => r.assignmentId)).toEqual(before.status.replicas.map((r) => r.assignmentId));
  });

  it('DELETE retires it: gone from the API, its assignment retired with an event', async () => {
    const { id } = await get('big');
    const response = await plane.admin('/api/v1/deployments/big', { method: 'DELETE' });
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ id, deleted: true });
    expect((await plane.admin('/api/v1/deployments/big')).status).toBe(404);
    const list = (await (await plane.admin('/api/v1/deployments')).json()) as { data: Array<{ name: string }> };
    expect(list.data.map((d) => d.name)).not.toContain('big');
    const machine = (await (await plane.admin(`/api/v1/machines/${gpuNode.machineId}`)).json()) as { runtimes: unknown[] };
    expect(machine.runtimes).toEqual([]);
  });

  it('drain and cordon answer unknown machines with 404 and a weak token with 403', async () => {
    expect((await plane.admin('/api/v1/machines/mch_nothing/drain', { method: 'POST' })).status).toBe(404);
    const weak = await fetch(`${plane.url}/api/v1/machines/${labNode.machineId}/drain`, { method: 'POST', headers: { authorization: `Bearer ${viewer}` } });
    expect(weak.status).toBe(403);
    const drained = await plane.admin(`/api/v1/machines/${labNode.machineId}/drain`, { method: 'POST' });
    expect(drained.status).toBe(200);
    // Nothing ran there: a drain of an empty machine is complete at once.
    expect(await drained.json()).toMatchObject({ draining: true, cordoned: true, drained: true });
    expect(await (await plane.admin(`/api/v1/machines/${labNode.machineId}/uncordon`, { method: 'POST' })).json()).toMatchObject({
      draining: false,
      cordoned: false,
      drained: false,
    });
  });
}

describe('deployment status (PGlite)', () => statusSuite('pglite'));
describePg('deployment status (PostgreSQL)', () => statusSuite('pg'));
