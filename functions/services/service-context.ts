import type { Db } from '../store/db.js';
import type { Ports } from '../context.js';
import { auditEvents } from '../store/schema/index.js';
import { newId } from '../../shared/ids.js';

/** What every service verb receives: the database (or the caller's transaction), the ports and who acts. */
export interface ServiceCtx {
  db: Db;
  ports: Ports;
  /** `tok_...`, `mch_...` or `system`. */
  actor: string;
  inTransaction?: boolean;
}

/** Runs `fn` in a transaction, reusing the caller's when there is one. */
export async function withTransaction<T>(ctx: ServiceCtx, fn: (tx: ServiceCtx) => Promise<T>): Promise<T> {
  if (ctx.inTransaction) return await fn(ctx);
  return await ctx.db.transaction(async (tx) => await fn({ ...ctx, db: tx as unknown as Db, inTransaction: true }));
}

/** Writes an audit row; call inside the transaction of the change it records. Never pass secrets in `details`. */
export async function audit(
  ctx: ServiceCtx,
  input: { workspaceId: string; action: string; target: string; details?: Record<string, unknown> },
): Promise<void> {
  await ctx.db.insert(auditEvents).values({
    id: newId('audit'),
    workspaceId: input.workspaceId,
    actor: ctx.actor,
    action: input.action,
    target: input.target,
    details: input.details ?? {},
  });
}
