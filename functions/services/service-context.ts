import type { Db } from '../store/db.js';
import type { Bus } from '../kernel/ports/bus.js';
import type { ControlPlaneConfig } from '../kernel/config.js';
import type { Metrics } from '../kernel/telemetry/metrics.js';
import type { ControlPlaneIdentity } from './identity.js';
import { auditEvents } from '../store/schema/index.js';
import { newId } from '../../shared/ids.js';
import { desc, eq, sql } from 'drizzle-orm';
import { auditHash, CHAIN_START, LEGACY_HASH } from '../../shared/audit-chain.js';

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
  /** Reconciles the fleet against what a verb just wrote; the host wires it to the controller. */
  afterWrite: AfterWrite;
}

/**
 * What a verb that changes desired state (or what a node reports of it) asks for once its write is committed: a
 * reconcile pass now, awaited, so the caller's answer already shows the placement. `skipIfBusy` leaves the pass to
 * one already running (a heartbeat's, whose change that pass or the next tick reads). `soon` awaits nothing: one
 * pass follows shortly for every such ask of the instance meanwhile (a fleet's first reports come all at once).
 */
export type AfterWrite = (options?: AfterWriteOptions) => Promise<void>;
type AfterWriteOptions = { skipIfBusy?: boolean; soon?: boolean };

/**
 * Asks for a reconcile once a verb's write has committed. Inside a caller's transaction nothing is committed yet:
 * the caller, whose write it is, asks when it commits.
 */
export async function reconcileAfterWrite(ctx: ServiceCtx & Pick<ServicePorts, 'afterWrite'>, options?: AfterWriteOptions): Promise<void> {
  if (!ctx.inTransaction) await ctx.afterWrite(options);
}

/** Runs `fn` in a transaction, reusing the caller's when there is one. */
export async function withTransaction<C extends ServiceCtx, T>(ctx: C, fn: (tx: C) => Promise<T>): Promise<T> {
  if (ctx.inTransaction) return await fn(ctx);
  return await ctx.db.transaction(async (tx) => await fn({ ...ctx, db: tx as unknown as Db, inTransaction: true }));
}

/**
 * Appends an audit entry to its workspace's hash chain (`shared/audit-chain.ts`); call inside the transaction of
 * the change it records, so that both land or neither does. Entries of one workspace are serialised by a
 * transaction-scoped advisory lock; the unique (workspace, seq) index refuses a fork even without it. Never pass
 * secrets or payloads in `details`.
 */
export async function audit(
  ctx: ServiceCtx,
  input: { workspaceId: string; action: string; target: string; outcome?: 'succeeded' | 'denied' | 'failed'; details?: Record<string, unknown> },
): Promise<void> {
  await withTransaction(ctx, async (tx) => {
    await tx.db.execute(sql`select pg_advisory_xact_lock(hashtext(${`audit:${input.workspaceId}`}))`);
    const [last] = await tx.db
      .select({ seq: auditEvents.seq, hash: auditEvents.hash })
      .from(auditEvents)
      .where(eq(auditEvents.workspaceId, input.workspaceId))
      .orderBy(desc(auditEvents.seq))
      .limit(1);
    const fields = {
      id: newId('audit'),
      workspaceId: input.workspaceId,
      seq: (last?.seq ?? 0) + 1,
      at: new Date().toISOString(),
      actor: ctx.actor,
      action: input.action,
      target: input.target,
      outcome: input.outcome ?? 'succeeded',
      // Through JSON once, so the hash covers exactly what jsonb stores (no undefined members).
      details: JSON.parse(JSON.stringify(input.details ?? {})) as Record<string, unknown>,
      // A log begun before the chain (rows 'legacy', which the append-only trigger keeps so): the first chained entry starts it.
      prevHash: !last || last.hash === LEGACY_HASH ? CHAIN_START : last.hash,
    };
    await tx.db.insert(auditEvents).values({ ...fields, at: new Date(fields.at), hash: await auditHash(fields) });
  });
}
