import { afterAll, beforeAll, expect, it } from 'vitest';
import { and, eq, isNull, sql } from 'drizzle-orm';
import { assignments, auditEvents, deployments, machines, models, modelAliases, modelVersions, workspaces } from '../../functions/store/schema/index.js';
import { openPgStore } from '../../functions/store/pg.js';
import type { Store } from '../../functions/store/db.js';
import { ControlPlaneConfig } from '../../functions/kernel/config.js';
import { createMemoryBus } from '../../functions/kernel/memory-bus.js';
import { createMetrics } from '../../functions/kernel/telemetry/metrics.js';
import { controllerTick, reconcileAfterWrites, reconcileOnce } from '../../functions/controller/driver.js';
import { OvercommitError, recheckReservations } from '../../functions/controller/recheck.js';
import { applyDeployment, describeDeployments } from '../../functions/services/deployments.js';
import { recordHeartbeat } from '../../functions/services/heartbeats.js';
import { loadFleetSnapshot } from '../../functions/services/fleet-load.js';
import { newId } from '../../shared/ids.js';
import type { Inventory } from '../../shared/contracts/inventory.js';
import type { WorkspacePolicy } from '../../shared/contracts/placement.js';
import { createTestDatabase, describePg } from '../helpers/pg.js';
import { TEST_INVENTORY, testGpu } from '../helpers/machine.js';
import { waitFor } from '../helpers/plane.js';

/**
 * Placement against a real PostgreSQL, with machine rows inserted directly (no agents): concurrent applies and
 * reconcile passes from three pools, as three control-plane instances would run them, never overcommit a machine
 * or the quota; the store's re-check refuses an overcommit by itself; registry versions, canaries and scale to zero
 * go from the rows to the signed spec and back to the read model.
 */
describePg('placement on PostgreSQL', () => {
  let database: Awaited<ReturnType<typeof createTestDatabase>>;
  const stores: Store[] = [];
  const config = ControlPlaneConfig.parse({});
  const ctxOf = (store: Store) => {
    const ctx = { db: store.db, actor: 'system', config, bus: createMemoryBus(), metrics: createMetrics() };
    return { ...ctx, afterWrite: reconcileAfterWrites(() => ctx) };
  };
  const twoGpus: Inventory = { ...TEST_INVENTORY, gpus: [testGpu(0), testGpu(1)] };

  async function workspace(name: string, policy: Partial<WorkspacePolicy>): Promise<string> {
    const id = newId('workspace');
    await stores[0]!.db.insert(workspaces).values({ id, name, policy });
    return id;
  }
  async function machine(workspaceId: string, name: string, labels: Record<string, string> = {}): Promise<string> {
    const id = newId('machine');
    await stores[0]!.db.insert(machines).values({ id, workspaceId, name, labels, inventory: twoGpus, lastHeartbeatAt: sql`now()`, reportedStatus: 'ready' });
    return id;
  }
  const live = (where: ReturnType<typeof eq>) =>
    stores[0]!.db
      .select()
      .from(assignments)
      .where(and(where, isNull(assignments.removedAt)));

  /** A machine's first heartbeat (sequence 1 of its boot), as the system's verb records it. */
  const firstReport = (ctx: ReturnType<typeof ctxOf>, ws: string, id: string, cachedVersions: string[] = []) =>
    recordHeartbeat({
      ctx: { ...ctx, actor: id },
      input: {
        machine: { machineId: id, workspaceId: ws, credentialId: 'cred', credentialExpiresAt: new Date(Date.now() + 60_000) },
        heartbeat: {
          machineId: id,
          bootId: `boot-${id}`,
          seq: 1,
          status: 'ready',
          gen: 0,
          runtimes: [],
          workers: [],
          address: null,
          warmModels: [],
          cachedVersions,
          gpus: [],
          metrics: {},
        },
      },
    });

  beforeAll(async () => {
    database = await createTestDatabase();
    stores.push(await openPgStore(database.url, { migrate: true }));
    for (let i = 0; i < 2; i++) stores.push(await openPgStore(database.url, { migrate: false }));
  });
  afterAll(async () => {
    for (const store of stores) await store.close();
    await database?.drop();
  });

  it('20 concurrent applies and passes from 3 pools: no machine past its GPUs, the quota held, every deployment placed or pending with a reason', async () => {
    const ws = await workspace('quota', { quota: { gpus: 4 } });
    const ids = [await machine(ws, 'q-1'), await machine(ws, 'q-2'), await machine(ws, 'q-3')];
    await Promise.all(
      Array.from({ length: 20 }, async (_, i) => {
        const ctx = ctxOf(stores[i % stores.length]!);
        const runtime = { kind: 'simulated' as const, model: `m${i}`, ttftMs: 1, tokensPerSecond: 1, loadMs: 1, memoryMiB: 1, failureRate: 0 };
        // The apply reconciles itself (afterWrite) before it returns.
        await applyDeployment({
          ctx,
          input: {
            workspaceId: ws,
            name: `d${i}`,
            model: `m${i}`,
            runtime,
            artifact: null,
            restartPolicy: { mode: 'on-failure', maxRestarts: 1, backoffMs: 100 },
            replicas: 1 + (i % 2),
            selector: {},
            gpus: 1,
            memoryMiB: 1024,
          },
        });
      }),
    );
    const perMachine = await Promise.all(ids.map(async (id) => (await live(eq(assignments.machineId, id))).reduce((sum, a) => sum + a.spec.resources.gpus, 0)));
    for (const gpus of perMachine) expect(gpus).toBeLessThanOrEqual(2);
    expect(perMachine.reduce((a, b) => a + b, 0)).toBe(4);
    const { items } = await describeDeployments({ ctx: ctxOf(stores[1]!), input: { workspaceId: ws, limit: 50, eventsPerDeployment: 5 } });
    expect(items).toHaveLength(20);
    for (const d of items) {
      const placed = d.status.replicas.filter((r) => r.desired).length;
      expect(placed + d.status.unplaceable, d.name).toBe(d.status.desired);
      if (d.status.unplaceable > 0) expect(d.status.degradedReasons.join(' '), d.name).toMatch(/workspace quota: needs 1 GPU, 0 of 4 left/);
    }
    // Nothing more is placed however often it reconciles, and the store agrees.
    expect((await reconcileOnce({ ctx: ctxOf(stores[2]!) })).filter((a) => a.type !== 'pending')).toEqual([]);
    await stores[0]!.db.transaction(async (tx) => recheckReservations(tx as never, { machineIds: ids, workspaceIds: [ws] }));
  });

  it('places the replicas of machines whose first heartbeats since enrollment come at once, each before the next tick', async () => {
    const ws = await workspace('first-reports', {});
    const ids = await Promise.all(
      ['f-1', 'f-2', 'f-3', 'f-4'].map(async (name) => {
        const id = await machine(ws, name, { first: 'true' });
        // Enrolled, never reported: pending, so nothing is placed on it yet.
        await stores[0]!.db.update(machines).set({ lastHeartbeatAt: null }).where(eq(machines.id, id));
        return id;
      }),
    );
    // One instance: its verbs share one afterWrite, as an instance's do.
    const ctx = ctxOf(stores[0]!);
    const runtime = { kind: 'simulated' as const, model: 'first', ttftMs: 1, tokensPerSecond: 1, loadMs: 1, memoryMiB: 1, failureRate: 0 };
    const deployment = await applyDeployment({
      ctx,
      input: {
        workspaceId: ws,
        name: 'first',
        model: 'first',
        runtime,
        artifact: null,
        restartPolicy: { mode: 'on-failure', maxRestarts: 1, backoffMs: 100 },
        replicas: 4,
        selector: { first: 'true' },
        // Both GPUs of a machine: one replica each.
        gpus: 2,
        memoryMiB: 1024,
      },
    });
    expect(await live(eq(assignments.deploymentId, deployment.id))).toEqual([]);
    // Four first reports at once: the passes they ask for overlap, and those that find the lock held skip.
    await Promise.all(ids.map((id) => firstReport(ctx, ws, id)));
    // No tick runs here: the passes that followed the reports placed one replica on each machine.
    await waitFor(async () => ((await live(eq(assignments.deploymentId, deployment.id))).length === 4 ? true : null), {
      timeoutMs: 5_000,
      what: 'four replicas placed',
    });
    const placedOn = (await live(eq(assignments.deploymentId, deployment.id))).map((a) => a.machineId).sort();
    expect(placedOn).toEqual([...ids].sort());
  });

  it("the store's re-check refuses a machine or a quota overcommitted in its transaction, which rolls back", async () => {
    const ws = await workspace('recheck', { quota: { replicas: 1 } });
    const m = await machine(ws, 'r-1');
    const depId = newId('deployment');
    await stores[0]!.db.insert(deployments).values({
      id: depId,
      workspaceId: ws,
      name: 'big',
      model: 'big',
      runtime: { kind: 'simulated', model: 'big', ttftMs: 1, tokensPerSecond: 1, loadMs: 1, memoryMiB: 1, failureRate: 0 },
      restartPolicy: { mode: 'on-failure', maxRestarts: 1, backoffMs: 100 },
      replicas: 1,
    });
    const row = (gpus: number) => {
      const id = newId('assignment');
      return {
        id,
        machineId: m,
        deploymentId: depId,
        spec: {
          assignmentId: id,
          deploymentId: depId,
          deploymentName: 'big',
          model: 'big',
          deploymentGeneration: 1,
          runtime: { kind: 'simulated' as const, model: 'big', ttftMs: 1, tokensPerSecond: 1, loadMs: 1, memoryMiB: 1, failureRate: 0 },
          artifact: null,
          restartPolicy: { mode: 'on-failure' as const, maxRestarts: 1, backoffMs: 100 },
          resources: { gpus, memoryMiB: 0 },
          startup: { timeoutMs: 60_000, probeIntervalMs: 1000, failureThreshold: 3 },
          templateHash: 'x',
        },
      };
    };
    const attempt = (gpuList: number[], touched: { machineIds: string[]; workspaceIds: string[] }) =>
      stores[1]!.db.transaction(async (tx) => {
        for (const gpus of gpuList) await tx.insert(assignments).values(row(gpus));
        await recheckReservations(tx as never, touched);
      });
    await expect(attempt([3], { machineIds: [m], workspaceIds: [] })).rejects.toThrow(
      new OvercommitError('placement refused, it would overcommit: machine r-1: 3 GPUs reserved, it has 2'),
    );
    await expect(attempt([1, 1], { machineIds: [], workspaceIds: [ws] })).rejects.toThrow(
      `placement refused, it would overcommit: workspace ${ws}: 2 replicas, quota 1`,
    );
    expect(await live(eq(assignments.machineId, m))).toEqual([]);
    await attempt([2], { machineIds: [m], workspaceIds: [ws] });
    expect(await live(eq(assignments.machineId, m))).toHaveLength(1);
  });

  it('registry versions and canaries reach the stored spec and the read model; an idle deployment goes to sleep on the tick', async () => {
    const ws = await workspace('registry', {});
    const lab = await machine(ws, 'lab-1', { site: 'lab' });
    // Both machines fit the stable set equally and placement breaks ties by id: a later millisecond gives the
    // second machine the later id (ids of one millisecond are random among themselves).
    await new Promise((resolve) => setTimeout(resolve, 2));
    const h100 = await machine(ws, 'lab-h100', { site: 'lab', gpu: 'h100' });
    const modelId = newId('model');
    await stores[0]!.db.insert(models).values({ id: modelId, workspaceId: ws, name: 'llama' });
    const versionId = async (label: string, state: 'stable' | 'approved') => {
      const id = newId('modelVersion');
      const files = [{ path: 'model.safetensors', size: 10, sha256: 'b'.repeat(64) }];
      await stores[0]!.db.insert(modelVersions).values({
        id,
        modelId,
        workspaceId: ws,
        version: label,
        format: 'safetensors',
        manifest: { files },
        fileCount: 1,
        totalBytes: 10,
        state,
        createdBy: 'tok_test',
      });
      return id;
    };
    const v1 = await versionId('v1', 'stable');
    const v2 = await versionId('v2', 'approved');
    await stores[0]!.db.insert(modelAliases).values({ workspaceId: ws, name: 'chat-default', versionId: v1, updatedBy: 'tok_test' });
    const depId = newId('deployment');
    await stores[0]!.db.insert(deployments).values({
      id: depId,
      workspaceId: ws,
      name: 'chat',
      model: 'chat',
      runtime: { kind: 'simulated', model: 'chat', ttftMs: 1, tokensPerSecond: 1, loadMs: 1, memoryMiB: 1, failureRate: 0 },
      restartPolicy: { mode: 'on-failure', maxRestarts: 1, backoffMs: 100 },
      replicas: 1,
      selector: { site: 'lab' },
      source: { kind: 'alias', alias: 'chat-default' },
      canary: { version: 'v2', weight: 10, replicas: 1, selector: { gpu: 'h100' } },
      memoryMiB: 1024,
      scaleToZero: { idleSeconds: 60 },
    });
    const ctx = ctxOf(stores[0]!);
    await reconcileOnce({ ctx });
    const placed = await live(eq(assignments.deploymentId, depId));
    expect(placed.map((a) => [a.machineId, a.track, a.spec.track, a.spec.version?.versionId]).sort()).toEqual(
      [
        [lab, 'stable', 'stable', v1],
        [h100, 'canary', 'canary', v2],
      ].sort(),
    );
    expect(placed[0]!.spec.version).toMatchObject({ urlsExpireAt: 0, files: [{ path: 'model.safetensors', url: '' }] });

    // The agent reports the version cached: the read model has it, and each runtime its track and version.
    await firstReport(ctxOf(stores[0]!), ws, h100, [v2]);
    const snapshot = await loadFleetSnapshot(stores[0]!.db, config, { workspaceId: ws });
    const h100View = snapshot.machines.find((m) => m.id === h100)!;
    expect(h100View.cachedVersions).toEqual([v2]);
    expect(snapshot.machines.flatMap((m) => m.runtimes.map((r) => [r.track, r.versionId])).sort()).toEqual([
      ['canary', v2],
      ['stable', v1],
    ]);

    // Idle for longer than idleSeconds (no request, changed an hour ago): the tick puts it to sleep and retires both sets.
    await stores[0]!.db.update(deployments).set({ updatedAt: sql`now() - interval '1 hour'` }).where(eq(deployments.id, depId));
    await controllerTick({ ctx });
    const [row] = await stores[0]!.db.select().from(deployments).where(eq(deployments.id, depId));
    expect(row!.asleepSince).not.toBeNull();
    expect(await live(eq(assignments.deploymentId, depId))).toEqual([]);
    const audits = await stores[0]!.db
      .select()
      .from(auditEvents)
      .where(and(eq(auditEvents.target, depId), eq(auditEvents.action, 'deployment.sleep')));
    expect(audits).toHaveLength(1);
    const { items } = await describeDeployments({ ctx, input: { workspaceId: ws, limit: 5, eventsPerDeployment: 5 } });
    expect(items[0]!.status).toMatchObject({ asleep: true, desired: 0, canary: { version: 'v2', desired: 0 } });
    expect(items[0]!.events.filter((e) => e.type === 'asleep').map((e) => e.message)).toEqual([
      expect.stringMatching(/^scaled to zero after \d+ s without a request$/),
    ]);
  });
});
