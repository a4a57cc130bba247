import { sql, type SQL } from 'drizzle-orm';
import type { Db } from '../store/db.js';
import { queryRows } from '../store/rows.js';
import type { ServiceCtx } from './service-context.js';

/**
 * Deletes the stored cross-instance payloads `where` selects and writes their deletion receipts, in one
 * statement: never one without the other, and one round trip on the pickup path to the node.
 */
export async function takePayloads(db: Db, where: SQL, reason: 'pickup' | 'deadline'): Promise<Array<{ machineId: string; invoke: string }>> {
  return await queryRows<{ machineId: string; invoke: string }>(
    db,
    sql`with taken as (delete from invocation_payloads where ${where} returning invocation_id, machine_id, invoke),
      receipt as (insert into payload_receipts (invocation_id, reason) select invocation_id, ${reason} from taken on conflict do nothing)
      select machine_id as "machineId", invoke from taken`,
  );
}

/** Deletes payloads nobody picked up before their deadline, with receipts. */
export async function sweepExpiredPayloads({ ctx }: { ctx: ServiceCtx }): Promise<void> {
  await takePayloads(ctx.db, sql`expires_at < now()`, 'deadline');
}
