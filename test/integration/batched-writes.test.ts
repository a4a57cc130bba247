import { Writable } from 'node:stream';
import { expect, it } from 'vitest';
import { eq, inArray } from 'drizzle-orm';
import pino from 'pino';
import { ControlPlaneConfig } from '../../functions/kernel/config.js';
import { createDataPlane } from '../../functions/dataplane/data-plane.js';
import { createMetrics } from '../../functions/kernel/telemetry/metrics.js';
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

  it("carries a workload's token, model, first byte and token counts, and the final record's replace the first's", async () => {
    await writeWorkloads(store().db, [row('wl_usage', { tokenId: 'tok_1', model: 'chat-large' })]);
    let [written] = await store().db.select().from(workloads).where(eq(workloads.id, 'wl_usage'));
    expect(written).toMatchObject({ tokenId: 'tok_1', model: 'chat-large', promptTokens: null, completionTokens: null, firstByteMs: null });
    await writeWorkloads(store().db, [
      row('wl_usage', { state: 'succeeded', tokenId: 'tok_1', model: 'chat-large', promptTokens: 17, completionTokens: 0, firstByteMs: 42 }),
    ]);
    [written] = await store().db.select().from(workloads).where(eq(workloads.id, 'wl_usage'));
    expect(written).toMatchObject({ state: 'succeeded', tokenId: 'tok_1', model: 'chat-large', promptTokens: 17, completionTokens: 0, firstByteMs: 42 });
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

  it('isolates the bad rows of a group commit: the others of the batch are written, each bad one is dropped, counted and logged without its values', async () => {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        lines.push(chunk.toString('utf8'));
        done();
      },
    });
    const metrics = createMetrics();
    const config = { ...ControlPlaneConfig.parse({}), writeBehindMs: 60_000 };
    const relay = createDataPlane({ deps: () => ({ db: store().db, config, logger: pino({ level: 'info' }, sink), metrics }) });
    const MARK = 'mark-9d1e';
    const good = Array.from({ length: 30 }, (_, i) => row(`wl_good_${i}`, { workspaceId: i % 2 ? 'wsp_a' : 'wsp_b', idempotencyKey: `${MARK}-ok-${i}` }));
    const bad = [
      row('wl_bad_date', { deadline: new Date(1e20), idempotencyKey: `${MARK}-date` }),
      row('wl_bad_nul', { idempotencyKey: `${MARK}\u0000nul` }),
      row('wl_bad_status', { statusCode: 2 ** 31, idempotencyKey: `${MARK}-status` }),
      row('wl_bad_attempts', { attempts: 2 ** 40, idempotencyKey: `${MARK}-attempts` }),
    ];
    // The bad rows among the good ones, as the requests of several workspaces arrive.
    const all = [...good.slice(0, 7), bad[0]!, ...good.slice(7, 15), bad[1]!, bad[2]!, ...good.slice(15), bad[3]!];
    for (const r of all) relay.workloads.put(r.id, r);
    await relay.workloads.flush();

    const written = await store()
      .db.select()
      .from(workloads)
      .where(
        inArray(
          workloads.id,
          all.map((r) => r.id),
        ),
      );
    expect(written.map((r) => r.id).sort()).toEqual(good.map((r) => r.id).sort());
    const dropped = await metrics.registry.getSingleMetricAsString('lunanexa_write_behind_dropped_total');
    expect(dropped).toContain('lunanexa_write_behind_dropped_total{what="workload records"} 4');
    const logged = lines.filter((l) => l.includes('dropped'));
    expect(logged.length).toBeGreaterThanOrEqual(1);
    for (const line of lines) expect(line).not.toContain(MARK);
  });
});
