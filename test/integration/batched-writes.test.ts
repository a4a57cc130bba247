import { expect, it } from 'vitest';
import { eq } from 'drizzle-orm';
import { machineJtis, workloads } from '../../functions/store/schema/index.js';
import { writeWorkloads, type WorkloadRow } from '../../functions/services/workloads.js';
import { writeJtis } from '../../functions/services/machine-auth.js';
import { describeStores } from '../helpers/store.js';

/** The column-array statements the write-behind batches use, against each real store. */
describeStores('batched writes', (store) => {
  const row = (id: string, over: Partial<WorkloadRow> = {}): WorkloadRow => ({
    id,
    workspaceId: 'wsp_1',
    deploymentId: 'dep_1',
    kind: 'chat',
    idempotencyKey: null,
    deadline: new Date('2030-01-01T00:00:00.000Z'),
    state: 'running',
    instanceId: 'ins_1',
    createdAt: new Date('2026-11-29T10:00:00.000Z'),
    ...over,
  });

  it('inserts new workload rows and moves known ones to their newer state, nulls and timestamps intact', async () => {
    await writeWorkloads(store().db, [row('wl_a'), row('wl_b', { idempotencyKey: 'key-b' })]);
    const finishedAt = new Date('2026-11-29T10:00:01.250Z');
    await writeWorkloads(store().db, [
      row('wl_a', { state: 'succeeded', machineId: 'mch_1', attempts: 2, statusCode: 200, finishedAt }),
      row('wl_c', { state: 'failed', attempts: 1, statusCode: 502, errorCode: 'node_lost', finishedAt }),
    ]);
    const rows = await store().db.select().from(workloads);
    const byId = new Map(rows.map((r) => [r.id, r]));
    expect(rows).toHaveLength(3);
    expect(byId.get('wl_a')).toMatchObject({ state: 'succeeded', machineId: 'mch_1', attempts: 2, statusCode: 200, errorCode: null, idempotencyKey: null });
    expect(byId.get('wl_a')!.finishedAt!.toISOString()).toBe(finishedAt.toISOString());
    expect(byId.get('wl_a')!.createdAt.toISOString()).toBe('2026-11-29T10:00:00.000Z');
    expect(byId.get('wl_b')).toMatchObject({ state: 'running', idempotencyKey: 'key-b', finishedAt: null, statusCode: null });
    expect(byId.get('wl_c')).toMatchObject({ state: 'failed', errorCode: 'node_lost', statusCode: 502 });
  });

  it('records replay-fence entries once, ignoring ones already there', async () => {
    const expiresAt = new Date('2030-01-01T00:01:00.000Z');
    await writeJtis(store().db, [{ jti: 'j1', machineId: 'mch_1', expiresAt }]);
    await writeJtis(store().db, [
      { jti: 'j1', machineId: 'mch_other', expiresAt },
      { jti: 'j2', machineId: 'mch_1', expiresAt },
    ]);
    const rows = await store().db.select().from(machineJtis);
    expect(rows.map((r) => r.jti).sort()).toEqual(['j1', 'j2']);
    const [first] = await store().db.select().from(machineJtis).where(eq(machineJtis.jti, 'j1'));
    expect(first!.machineId).toBe('mch_1');
    expect(first!.expiresAt.toISOString()).toBe(expiresAt.toISOString());
  });
});
