import { expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { invocationPayloads, payloadReceipts } from '../../functions/store/schema/index.js';
import { sweepExpiredPayloads, takePayloads } from '../../functions/services/payloads.js';
import type { ServiceCtx } from '../../functions/services/service-context.js';
import { describeStores } from '../helpers/store.js';

/** Payloads in transit leave the store only with a receipt: on pickup, or at their deadline. */
describeStores('payloads in transit', (store) => {
  const payload = (invocationId: string, expiresAt: Date) => ({ invocationId, machineId: 'mch_1', invoke: `{"invocationId":"${invocationId}"}`, expiresAt });

  it('a pickup takes the payload once and leaves a pickup receipt', async () => {
    await store().db.insert(invocationPayloads).values(payload('inv_pick', new Date(Date.now() + 60_000)));
    const first = await takePayloads(store().db, sql`invocation_id = ${'inv_pick'}`, 'pickup');
    expect(first).toEqual([{ machineId: 'mch_1', invoke: '{"invocationId":"inv_pick"}' }]);
    expect(await takePayloads(store().db, sql`invocation_id = ${'inv_pick'}`, 'pickup')).toEqual([]);
    const receipts = await store().db.select().from(payloadReceipts);
    expect(receipts.filter((r) => r.invocationId === 'inv_pick').map((r) => r.reason)).toEqual(['pickup']);
  });

  it('the sweep deletes only payloads past their deadline, each with a deadline receipt', async () => {
    await store().db.insert(invocationPayloads).values([payload('inv_old', new Date(Date.now() - 1_000)), payload('inv_live', new Date(Date.now() + 60_000))]);
    await sweepExpiredPayloads({ ctx: { db: store().db } as ServiceCtx });
    const left = await store().db.select().from(invocationPayloads);
    expect(left.map((p) => p.invocationId)).toEqual(['inv_live']);
    const receipts = await store().db.select().from(payloadReceipts);
    expect(receipts.filter((r) => r.invocationId === 'inv_old').map((r) => r.reason)).toEqual(['deadline']);
    expect(receipts.some((r) => r.invocationId === 'inv_live')).toBe(false);
  });
});
