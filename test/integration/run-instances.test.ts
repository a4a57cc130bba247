import { afterAll, beforeAll, expect, it } from 'vitest';
import { eq, sql } from 'drizzle-orm';
import { machines, runs, workspaces } from '../../functions/store/schema/index.js';
import { putRuntimeTemplate } from '../../functions/services/runtime-templates.js';
import { machineMemoryMiB } from '../../functions/core/scheduler/place.js';
import type { Inventory } from '../../shared/contracts/inventory.js';
import { queryRows } from '../../functions/store/rows.js';
import { createTestDatabase, describePg } from '../helpers/pg.js';
import { STEADY_LIVENESS, startTestPlane, type TestPlane } from '../helpers/plane.js';
import { enrollTestMachine, heartbeatBody, TEST_INVENTORY, testGpu } from '../helpers/machine.js';

const QUOTA_GPUS = 10;
const fourGpus: Inventory = { ...TEST_INVENTORY, gpus: [0, 1, 2, 3].map((i) => testGpu(i)) };

/**
 * Two control-plane instances on one PostgreSQL: 20 run submissions arrive at once, split over both, while both
 * reconcile. The passes are serialised by their advisory lock and re-checked against the store's sums, so no
 * machine is ever reserved past its GPUs or memory and the workspace never past its GPU quota, during the passes
 * (sampled) or after them.
 */
describePg('runs on two instances sharing one PostgreSQL', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let planeA: TestPlane;
  let planeB: TestPlane;

  /** What the held workers reserve, per machine, from the store. */
  const held = async () =>
    queryRows<{ machine_id: string; gpus: string; memory: string }>(
      planeA.systemCtx.db,
      sql`select machine_id, sum((resources->>'gpus')::int) as gpus, sum((resources->>'memoryMiB')::int) as memory
          from run_workers where released_at is null and machine_id is not null group by machine_id`,
    );
  const excess = async (): Promise<string[]> => {
    const rows = await held();
    const found = rows.flatMap((r) => [
      ...(Number(r.gpus) > fourGpus.gpus.length ? [`${r.machine_id}: ${r.gpus} GPUs`] : []),
      ...(Number(r.memory) > machineMemoryMiB(fourGpus) ? [`${r.machine_id}: ${r.memory} MiB`] : []),
    ]);
    const total = rows.reduce((sum, r) => sum + Number(r.gpus), 0);
    return total > QUOTA_GPUS ? [...found, `workspace: ${total} GPUs`] : found;
  };

  beforeAll(async () => {
    db = await createTestDatabase();
    planeA = await startTestPlane({ store: 'pg', databaseUrl: db.url, config: { ...STEADY_LIVENESS, reconcileIntervalMs: 600_000 } });
    planeB = await startTestPlane({ store: 'pg', databaseUrl: db.url, config: { ...STEADY_LIVENESS, reconcileIntervalMs: 600_000 } });
    await planeA.systemCtx.db
      .update(workspaces)
      .set({ policy: { quota: { gpus: QUOTA_GPUS } } })
      .where(eq(workspaces.id, planeA.workspaceId));
    await putRuntimeTemplate({
      ctx: planeA.systemCtx,
      input: {
        workspaceId: planeA.workspaceId,
        name: 'trainer',
        spec: {
          description: 'a trainer',
          healthPath: '/health',
          metricsPath: null,
          executable: '/opt/train/bin/train',
          executableSha256: '1'.repeat(64),
          args: [],
          params: {},
          env: [],
        },
      },
    });
    for (const name of ['pair-a', 'pair-b', 'pair-c']) {
      const machine = await enrollTestMachine(planeA, name);
      await planeA.systemCtx.db.update(machines).set({ inventory: fourGpus }).where(eq(machines.id, machine.machineId));
      expect((await machine.request('POST', '/agent/v1/heartbeat', heartbeatBody(machine, 1, { address: null }))).status).toBe(200);
    }
  }, 120_000);
  afterAll(async () => {
    await planeA?.stop();
    await planeB?.stop();
    await db?.drop();
  });

  it('never overcommits a machine or the quota while 20 submissions and both instances race', async () => {
    expect(planeB.workspaceId).toBe(planeA.workspaceId);
    const submit = (plane: TestPlane, i: number) =>
      plane.admin('/api/v1/runs', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        // 1 or 2 workers of 1 GPU and a third of a GPU's memory each, so that GPUs, memory and the quota all bind.
        body: JSON.stringify({ name: `race-${i}`, spec: { template: 'trainer', workers: 1 + (i % 2), resources: { gpus: 1, memoryMiB: 40_000 } } }),
      });
    let sampling = true;
    const seen: string[] = [];
    const sampler = (async () => {
      while (sampling) seen.push(...(await excess()));
    })();
    const answers = await Promise.all(
      Array.from({ length: 20 }, async (_, i) => {
        const plane = i % 2 === 0 ? planeA : planeB;
        const response = await submit(plane, i);
        await plane.systemCtx.afterWrite();
        return response.status;
      }),
    );
    await Promise.all([planeA.systemCtx.afterWrite(), planeB.systemCtx.afterWrite()]);
    sampling = false;
    await sampler;
    expect(answers).toEqual(Array(20).fill(201));
    expect(seen).toEqual([]);
    expect(await excess()).toEqual([]);
    // The fleet and the quota are used, not left idle: 10 GPUs of the quota held, the rest waiting with a reason.
    const total = (await held()).reduce((sum, r) => sum + Number(r.gpus), 0);
    expect(total).toBeGreaterThanOrEqual(QUOTA_GPUS - 1);
    const waiting = await planeA.systemCtx.db.select().from(runs).where(eq(runs.state, 'pending'));
    expect(waiting.length).toBeGreaterThan(0);
    for (const run of waiting) expect(run.reason).toMatch(/quota|fit/);
  }, 120_000);
});
