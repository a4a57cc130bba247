import type { Db } from '../store/db.js';
import type { Bus } from '../relay/bus.js';
import type { ControlPlaneConfig } from '../config.js';
import type { Metrics } from '../telemetry/metrics.js';
import type { WriteBehind } from '../store/write-behind.js';
import type { ControlPlaneIdentity } from './identity.js';
import { auditEvents, type machineJtis } from '../store/schema/index.js';
import { newId } from '../../shared/ids.js';

/**
 * What every service verb receives: the database (or the caller's transaction) and who acts. A verb that needs
 * more names it in its own signature (`ServiceCtx & Pick<ServicePorts, 'bus'>`), so a caller sees what it uses.
 */
export interface ServiceCtx {
  db: Db;
  /** `tok_...`, `mch_...` or `system`. */
  actor: string;
  inTransaction?: boolean;
}

/** The ports verbs may name, each typed from its own module (services depend on no composition root). */
export interface ServicePorts {
  config: ControlPlaneConfig;
  bus: Bus;
  metrics: Metrics;
  /** Cluster id and signing key, loaded once. */
  identity: () => Promise<ControlPlaneIdentity>;
  /** This control-plane instance, recorded on stream leases. */
  instanceId: string;
  /** Replay-fence entries of machine requests, written behind them. */
  jtis: WriteBehind<typeof machineJtis.$inferInsert>;
}

/** Runs `fn` in a transaction, reusing the caller's when there is one. */
export async function withTransaction<C extends ServiceCtx, T>(ctx: C, fn: (tx: C) => Promise<T>): Promise<T> {
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
