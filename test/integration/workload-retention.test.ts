import { eq, inArray } from 'drizzle-orm';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { controllerTick } from '../../functions/controller/driver.js';
import { sweepExpiredWorkloads, writeWorkloads, type WorkloadRow } from '../../functions/services/workloads.js';
import { workloads } from '../../functions/store/schema/index.js';
import type { UsageReport } from '../../shared/contracts/usage.js';
import { describePg } from '../helpers/pg.js';
import { startTestPlane, type TestPlane } from '../helpers/plane.js';

/** Workload rows are kept `workloadRetentionDays` (30 by default), then the controller tick deletes them in bounded batches. */
describePg('workload retention', () => {
  let plane: TestPlane;
  const DAY_MS = 86_400_000;
  let serial = 0;
  const workload = (ageDays: number, over: Partial<WorkloadRow> = {}): WorkloadRow => ({
    id: `wkl_retention_${(serial += 1)}`,
    workspaceId: plane.workspaceId,
    deploymentId: 'dep_1',
    kind: 'chat',
    idempotencyKey: null,
    deadline: new Date(Date.now() + DAY_MS),
    state: 'succeeded',
    instanceId: plane.ports.instanceId,
    createdAt: new Date(Date.now() - ageDays * DAY_MS),
    ...over,
  });
  const kept = async (ids: string[]) =>
    (await plane.ports.store.db.select({ id: workloads.id }).from(workloads).where(inArray(workloads.id, ids))).map((r) => r.id).sort();

  beforeAll(async () => {
    // The tick runs when the test says (its first one ran at start).
    plane = await startTestPlane({ store: 'pg', config: { reconcileIntervalMs: 3_600_000 } });
  });
  afterAll(async () => await plane?.stop());

  it('keeps 30 days by default, and the controller tick deletes the finished workloads older than that', async () => {
    expect(plane.ports.config.workloadRetentionDays).toBe(30);
    const old = [workload(31), workload(400, { state: 'failed' })];
    const recent = [workload(29), workload(0)];
    // Still running (its holder alive): not deleted, however old.
    const running = workload(31, { state: 'running' });
    await writeWorkloads(plane.ports.store.db, [...old, ...recent, running]);
    await controllerTick({ ctx: plane.systemCtx });
    expect(await kept([...old, ...recent, running].map((w) => w.id))).toEqual([...recent, running].map((w) => w.id).sort());
    await plane.ports.store.db.delete(workloads).where(eq(workloads.id, running.id));
  });

  it('deletes in bounded batches', async () => {
    const old = Array.from({ length: 5 }, () => workload(40));
    await writeWorkloads(plane.ports.store.db, old);
    expect(await sweepExpiredWorkloads({ ctx: plane.systemCtx, input: { retentionDays: 30, batchSize: 2, maxBatches: 1 } })).toBe(2);
    expect(await kept(old.map((w) => w.id))).toHaveLength(3);
    expect(await sweepExpiredWorkloads({ ctx: plane.systemCtx, input: { retentionDays: 30, batchSize: 2, maxBatches: 5 } })).toBe(3);
    expect(await kept(old.map((w) => w.id))).toHaveLength(0);
  });

  it('says in a usage report which retention window it covers', async () => {
    const response = await fetch(`${plane.url}/api/v1/usage`, { headers: { authorization: `Bearer ${plane.adminToken}` } });
    expect(response.status).toBe(200);
    const report = (await response.json()) as UsageReport;
    expect(report.retentionDays).toBe(30);
    const firstKept = new Date(Math.floor((Date.now() - 30 * DAY_MS) / DAY_MS) * DAY_MS + DAY_MS).toISOString().slice(0, 10);
    expect(report.retainedFrom).toBe(firstKept);
  });
});
