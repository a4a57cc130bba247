import { and, eq, isNull } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { controllerTick } from '../../functions/controller/driver.js';
import { assignments, auditEvents, deployments, machines } from '../../functions/store/schema/index.js';
import { DeploymentDetail } from '../../shared/contracts/deployment.js';
import { enrollTestMachine, heartbeatBody, runtimeReport, type TestMachine } from '../helpers/machine.js';
import { describePg } from '../helpers/pg.js';
import { startTestPlane, type StoreKind, type TestPlane, waitFor } from '../helpers/plane.js';

/**
 * The autoscaler in the controller tick (docs/autoscaling.md), against both stores: machines driven over the real
 * agent protocol (a stream attached, heartbeats whose runtime reports carry the load), ticks run by the test.
 */
function autoscaleSuite(store: StoreKind) {
  let plane: TestPlane;
  const nodes: TestMachine[] = [];
  const streams: AbortController[] = [];
  let seq = 0;

  const spec = (autoscale: Record<string, unknown> | null, extra: Record<string, unknown> = {}) => ({
    model: 'auto',
    runtime: { kind: 'simulated', model: 'auto' },
    replicas: 1,
    selector: { pool: 'auto' },
    memoryMiB: 1024,
    maxConcurrency: 8,
    autoscale,
    ...extra,
  });
  const policy = { minReplicas: 1, maxReplicas: 4, target: { metric: 'inFlightPerReplica', value: 2 }, scaleUpAfterMs: 0, scaleDownAfterMs: 0 };
  const put = (body: unknown) =>
    plane.admin('/api/v1/deployments/auto', { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const detail = async () => DeploymentDetail.parse(await (await plane.admin('/api/v1/deployments/auto')).json());
  const tick = () => controllerTick({ ctx: plane.systemCtx });

  /** Each node reports its replicas of `auto` ready, each with `inFlight` invocations. */
  async function report(inFlight: number) {
    for (const node of nodes) {
      const [row] = await plane.systemCtx.db.select({ gen: machines.desiredGen }).from(machines).where(eq(machines.id, node.machineId));
      const mine = await plane.systemCtx.db
        .select({ id: assignments.id, deploymentId: assignments.deploymentId })
        .from(assignments)
        .where(and(eq(assignments.machineId, node.machineId), isNull(assignments.removedAt)));
      const runtimes = mine.map((a) => runtimeReport(a.id, a.deploymentId, { gen: row!.gen, activeInvocations: inFlight }));
      const answer = await node.request('POST', '/agent/v1/heartbeat', heartbeatBody(node, ++seq, { gen: row!.gen, runtimes }));
      expect(answer.status, await answer.clone().text()).toBe(200);
    }
  }

  beforeAll(async () => {
    // Ticks are the test's; liveness is slow, so that nothing turns stale between two steps on a loaded machine.
    plane = await startTestPlane({
      store,
      config: {
        reconcileIntervalMs: 600_000,
        heartbeatIntervalMs: 20_000,
        machineLifetimeMs: 600_000,
        runtimeTtlMs: 600_000,
        streamPingMs: 60_000,
        streamPingTimeoutMs: 120_000,
      },
    });
    // Two machines of the pool: room for two replicas (one per machine).
    for (const name of ['auto-1', 'auto-2']) {
      const node = await enrollTestMachine(plane, name, { pool: 'auto' });
      const controller = new AbortController();
      const stream = await fetch(`${plane.url}/agent/v1/stream`, {
        headers: { authorization: `Bearer ${await node.sign('GET', '/agent/v1/stream', '')}` },
        signal: controller.signal,
      });
      expect(stream.status).toBe(200);
      nodes.push(node);
      streams.push(controller);
    }
    await report(0);
  });
  afterAll(async () => {
    for (const s of streams) s.abort();
    await plane?.stop();
  });

  it('refuses a policy it cannot follow, in the API envelope, and writes nothing', async () => {
    const refusals: Array<[Record<string, unknown>, string]> = [
      [spec(policy, { scaleToZero: { idleSeconds: 60 } }), 'autoscale.minReplicas 0'],
      [spec({ ...policy, target: { metric: 'inFlightPerReplica', value: 9 } }), 'above maxConcurrency'],
      [spec({ ...policy, minReplicas: 5 }), 'maxReplicas must be at least minReplicas'],
      [spec({ ...policy, target: { metric: 'rps', value: 1 } }), "target's metric must be one of"],
    ];
    for (const [body, message] of refusals) {
      const answer = await put(body);
      expect(answer.status).toBe(400);
      expect(JSON.stringify(await answer.json())).toContain(message);
    }
    expect((await plane.admin('/api/v1/deployments/auto')).status).toBe(404);
  });

  it('starts within its bounds, scales out as far as the fleet has room, and scales in, each step an event and an audit entry', async () => {
    // A count above the policy's maximum starts at the maximum; then the fleet's room bounds what is placed.
    expect((await put(spec(policy, { replicas: 9 }))).status).toBe(200);
    expect((await detail()).replicas).toBe(4);
    expect((await put(spec(policy))).status).toBe(200);
    expect((await detail()).replicas).toBe(4);
    // Policy bounds, not load: the same spec with a lower maximum moves the count at once.
    expect((await put(spec({ ...policy, maxReplicas: 1 }))).status).toBe(200);
    expect((await detail()).replicas).toBe(1);
    expect((await put(spec(policy))).status).toBe(200);
    await tick();
    await report(0);
    await waitFor(async () => ((await detail()).status.ready === 1 ? true : null), { what: 'one replica ready' });

    // Eight in flight on one replica wants four; two machines hold two.
    await report(8);
    await tick();
    const out = await detail();
    expect(out.replicas).toBe(2);
    expect(out.status.autoscaler).toMatchObject({
      action: 'up',
      from: 1,
      to: 2,
      observed: { metric: 'inFlightPerReplica', value: 8, target: 2, replicas: 1 },
      reason: 'in flight 8 per replica (target 2): 4 replicas wanted for 0 s, room for 1',
    });
    expect(out.events.filter((e) => e.type === 'scaled').map((e) => e.message)).toEqual([
      'scaled from 1 to 2: in flight 8 per replica (target 2): 4 replicas wanted for 0 s, room for 1',
    ]);
    const [entry] = await plane.systemCtx.db.select().from(auditEvents).where(eq(auditEvents.action, 'deployment.autoscale'));
    expect(entry).toMatchObject({ target: out.id, details: { name: 'auto', from: 1, to: 2 } });
    expect((await detail()).generation).toBe(out.generation);

    // Placed by the same pass; reported ready with the load spread: on target, it holds.
    expect(out.status.replicas.filter((r) => r.desired)).toHaveLength(2);
    await report(2);
    await tick();
    expect((await detail()).status.autoscaler).toMatchObject({ action: 'hold', to: 2, reason: 'in flight 2 per replica (target 2): within 10 % of target' });

    // The load gone, it scales in (halving at most) and retires a replica.
    const retired = (await detail()).events.filter((e) => e.type === 'retired').length;
    await report(0);
    await tick();
    const back = await detail();
    expect(back.replicas).toBe(1);
    expect(back.status.autoscaler).toMatchObject({ action: 'down', from: 2, to: 1 });
    expect(back.events.filter((e) => e.type === 'retired')).toHaveLength(retired + 1);
  });

  it('measures a changed policy afresh, and leaves a fixed count alone', async () => {
    expect((await detail()).replicas).toBe(1);
    const kept = async () =>
      (await plane.systemCtx.db.select({ state: deployments.autoscaleState }).from(deployments).where(eq(deployments.name, 'auto')))[0]!.state;
    expect(await kept()).not.toBeNull();
    expect((await put(spec({ ...policy, scaleUpAfterMs: 60_000 }))).status).toBe(200);
    expect(await kept()).toBeNull();
    // A fixed count again: the autoscaler leaves it alone, and scaling works.
    expect((await put(spec(null))).status).toBe(200);
    await report(8);
    await tick();
    expect((await detail()).status.autoscaler).toBeNull();
    expect((await detail()).replicas).toBe(1);
  });
}

describe('autoscaling in the controller (PGlite)', () => autoscaleSuite('pglite'));
describePg('autoscaling in the controller (PostgreSQL)', () => autoscaleSuite('pg'));
