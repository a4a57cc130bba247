import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { and, eq } from 'drizzle-orm';
import type { DeploymentDetail } from '../../shared/contracts/deployment.js';
import type { MachineView } from '../../shared/contracts/machine.js';
import { createApiToken } from '../../functions/services/api-tokens.js';
import { assignments, auditEvents, replicaFailures } from '../../functions/store/schema/index.js';
import { enrollTestMachine, heartbeatBody, runtimeReport, type TestMachine } from '../helpers/machine.js';
import { describePg } from '../helpers/pg.js';
import { startTestPlane, waitFor, type StoreKind, type TestPlane } from '../helpers/plane.js';

/**
 * A replica whose runtime fails for good, over the management API, with machines driven directly over HTTP (their
 * heartbeats are the only report the control plane gets): it is replaced elsewhere, its machine is marked until an
 * operator clears it, and its deployment says it is degraded.
 */
function replicaFailureSuite(store: StoreKind) {
  let plane: TestPlane;
  let nodes: Record<'gpu-1' | 'gpu-2', TestMachine>;
  let viewer: string;
  let seq = 0;

  const spec = (replicas = 1) => ({
    model: 'flaky',
    runtime: { kind: 'simulated', model: 'flaky' },
    restartPolicy: { mode: 'on-failure', maxRestarts: 2, backoffMs: 100 },
    replicas,
    selector: { site: 'lab' },
    memoryMiB: 1024,
  });
  const detail = async () => {
    const response = await plane.admin('/api/v1/deployments/flaky');
    expect(response.status).toBe(200);
    return (await response.json()) as DeploymentDetail;
  };
  const machine = async (node: TestMachine) => (await (await plane.admin(`/api/v1/machines/${node.machineId}`)).json()) as MachineView;
  const nameOf = (machineId: string) => (Object.entries(nodes).find(([, node]) => node.machineId === machineId)?.[0] ?? machineId) as keyof typeof nodes;
  /** The desired replicas of the deployment on a node. */
  const desiredOn = async (node: TestMachine) =>
    await plane.systemCtx.db
      .select()
      .from(assignments)
      .where(and(eq(assignments.machineId, node.machineId), eq(assignments.deploymentId, (await detail()).id)));
  /** Reports the node's replica of the deployment failed after `restarts` (a heartbeat with nothing else in it). */
  const fail = async (node: TestMachine, assignmentId: string, deploymentId: string, restarts: number) => {
    const response = await node.request(
      'POST',
      '/agent/v1/heartbeat',
      heartbeatBody(node, ++seq, {
        status: 'degraded',
        runtimes: [runtimeReport(assignmentId, deploymentId, { state: 'failed', restarts, message: 'exit code 1' })],
      }),
    );
    expect(response.status).toBe(200);
  };
  const post = (path: string, token?: string) => fetch(`${plane.url}${path}`, { method: 'POST', headers: token ? { authorization: `Bearer ${token}` } : {} });

  beforeAll(async () => {
    // The machines heartbeat only when a test says so: liveness is slow so that they never go stale between steps.
    plane = await startTestPlane({ store, config: { heartbeatIntervalMs: 20_000, machineLifetimeMs: 600_000, runtimeTtlMs: 600_000 } });
    nodes = { 'gpu-1': await enrollTestMachine(plane, 'gpu-1', { site: 'lab' }), 'gpu-2': await enrollTestMachine(plane, 'gpu-2', { site: 'lab' }) };
    for (const node of Object.values(nodes)) expect((await node.request('POST', '/agent/v1/heartbeat', heartbeatBody(node, ++seq))).status).toBe(200);
    viewer = (await createApiToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name: 'viewer', role: 'viewer' } })).token;
    expect((await plane.admin('/api/v1/deployments/flaky', { method: 'PUT', body: JSON.stringify(spec()) })).status).toBe(200);
  });
  afterAll(async () => {
    await plane?.stop();
  });

  let first: keyof typeof nodes;
  let second: keyof typeof nodes;

  it('a failed replica with restarts left stays where it is, and the deployment is degraded meanwhile', async () => {
    const { id, status } = await detail();
    const [replica] = status.replicas;
    first = nameOf(replica!.machineId);
    second = first === 'gpu-1' ? 'gpu-2' : 'gpu-1';
    await fail(nodes[first], replica!.assignmentId, id, 1);
    const after = (await detail()).status;
    expect(after.replicas.map((r) => [r.assignmentId, r.desired])).toEqual([[replica!.assignmentId, true]]);
    expect(after).toMatchObject({ failed: 1, degraded: true, degradedReasons: [`replica failed on ${first}: exit code 1 (1 of 2 restarts used)`] });
    expect((await machine(nodes[first])).attention).toEqual([]);
  });

  it('past its restart limit it is retired with its reason, replaced on the other machine, and its machine is marked', async () => {
    const { id, status } = await detail();
    const lost = status.replicas[0]!.assignmentId;
    await fail(nodes[first], lost, id, 2);
    // The heartbeat's own reconcile pass gives way to a tick that holds the lock: that tick, or the next, acts.
    const after = await waitFor(
      async () => {
        const d = await detail();
        return d.status.replicas.some((r) => r.desired && r.machineName === second) ? d : null;
      },
      { timeoutMs: 10_000, what: 'the replacement placed' },
    );
    expect(after.status.replicas.filter((r) => r.desired).map((r) => r.machineName)).toEqual([second]);
    expect(after.status).toMatchObject({ ready: 0, degraded: true });
    expect(after.status.degradedReasons).toContain(`replica failed on ${first}: exit code 1 after 2 restarts`);
    expect(after.events.filter((e) => e.type === 'replica_failed')).toEqual([
      expect.objectContaining({ machineId: nodes[first].machineId, assignmentId: lost, message: `replica failed on ${first}: exit code 1 after 2 restarts` }),
    ]);
    const marked = await machine(nodes[first]);
    expect(marked.attention).toEqual([
      { deploymentId: id, deploymentName: 'flaky', assignmentId: lost, reason: 'exit code 1 after 2 restarts', failedAt: expect.any(String) },
    ]);
    expect(Date.parse(marked.attention[0]!.failedAt)).toBeGreaterThan(Date.now() - 60_000);
    expect((await machine(nodes[second])).attention).toEqual([]);
  });

  it('failed on every machine: unplaceable with every reason, and nothing more is placed (no loop)', async () => {
    const { id, status } = await detail();
    const replacement = status.replicas.find((r) => r.desired)!;
    await fail(nodes[second], replacement.assignmentId, id, 2);
    await waitFor(async () => (await detail()).status.replicas.every((r) => !r.desired), { timeoutMs: 10_000, what: 'the replacement retired' });
    // Its node no longer reports the retired runtime: a later heartbeat (and reconcile) changes nothing.
    expect((await nodes[second].request('POST', '/agent/v1/heartbeat', heartbeatBody(nodes[second], ++seq))).status).toBe(200);
    const after = (await detail()).status;
    expect(after.replicas.filter((r) => r.desired)).toEqual([]);
    expect(after.unplaceable).toBe(1);
    expect(Object.fromEntries(after.unplaceableReasons.map((r) => [r.machineName, r.reason]))).toEqual({
      [first]: 'replica failed here: exit code 1 after 2 restarts',
      [second]: 'replica failed here: exit code 1 after 2 restarts',
    });
    expect(after.degraded).toBe(true);
    expect(after.degradedReasons).toContain(`1 replica cannot be placed: ${after.unplaceableReasons.map((r) => `${r.machineName}: ${r.reason}`).join('; ')}`);
    const placed = await plane.systemCtx.db.select().from(assignments).where(eq(assignments.deploymentId, id));
    expect(placed).toHaveLength(2);
  });

  it('clear-failures: 401 without a token, 403 for a viewer, 404 for an unknown machine, in the envelope', async () => {
    expect((await post(`/api/v1/machines/${nodes[first].machineId}/clear-failures`)).status).toBe(401);
    const weak = await post(`/api/v1/machines/${nodes[first].machineId}/clear-failures`, viewer);
    expect(weak.status).toBe(403);
    expect(((await weak.json()) as { error: { code: string } }).error.code).toBe('forbidden');
    const unknown = await post('/api/v1/machines/mch_nothing/clear-failures', plane.adminToken);
    expect(unknown.status).toBe(404);
    expect(((await unknown.json()) as { error: { code: string } }).error.code).toBe('not_found');
    expect((await machine(nodes[first])).attention).toHaveLength(1);
  });

  it('clearing a machine lets the deployment back on it at once, and is audited', async () => {
    const response = await post(`/api/v1/machines/${nodes[first].machineId}/clear-failures`, plane.adminToken);
    expect(response.status).toBe(200);
    expect(((await response.json()) as MachineView).attention).toEqual([]);
    expect((await desiredOn(nodes[first])).filter((a) => a.removedAt === null)).toHaveLength(1);
    const { id, status } = await detail();
    expect(status.unplaceable).toBe(0);
    expect(status.replicas.filter((r) => r.desired).map((r) => r.machineName)).toEqual([first]);
    const [row] = await plane.systemCtx.db
      .select()
      .from(auditEvents)
      .where(and(eq(auditEvents.action, 'machine.clear-failures'), eq(auditEvents.target, nodes[first].machineId)));
    expect(row?.details).toEqual({ cleared: [{ deploymentId: id, assignmentId: expect.any(String) }] });
    // The other machine's mark stays until someone clears it too.
    expect((await machine(nodes[second])).attention).toHaveLength(1);
  });

  it('deleting the deployment works with its failures recorded, and its marks leave the machine', async () => {
    const { id } = await detail();
    expect((await plane.admin('/api/v1/deployments/flaky', { method: 'DELETE' })).status).toBe(200);
    expect((await machine(nodes[second])).attention).toEqual([]);
    // The rows stay as history: only the view forgets a deployment that is gone.
    expect(await plane.systemCtx.db.select().from(replicaFailures).where(eq(replicaFailures.deploymentId, id))).toHaveLength(2);
  });
}

describe('replica failures (PGlite)', () => replicaFailureSuite('pglite'));
describePg('replica failures (PostgreSQL)', () => replicaFailureSuite('pg'));
