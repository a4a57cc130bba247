import { and, asc, desc, eq, gt, gte, lt } from 'drizzle-orm';
import { verifyChain } from '../../shared/audit-chain.js';
import type { AuditEntry, AuditOutcome, ChainVerdict } from '../../shared/contracts/audit.js';
import { auditEvents } from '../store/schema/index.js';
import { cutPage, type PageRequest, type RowPage } from '../core/paging.js';
import type { ServiceCtx } from './service-context.js';

/** Rows read per query when a whole chain is read (export, verification): memory stays bounded by it. */
const AUDIT_BATCH = 500;

/** What the audit log can be filtered by; every filter given must hold. */
export interface AuditFilter {
  action?: string;
  actor?: string;
  target?: string;
  outcome?: AuditOutcome;
  /** Entries at or after. */
  since?: Date;
  /** Entries before. */
  until?: Date;
}

/** A row as its entry: `at` as it was hashed (ISO-8601, milliseconds; the writer stores no finer time). */
function entryOf(row: typeof auditEvents.$inferSelect): AuditEntry {
  const { id, workspaceId, seq, at, actor, action, target, outcome, details, prevHash, hash } = row;
  return { id, workspaceId, seq, at: at.toISOString(), actor, action, target, outcome, details, prevHash, hash };
}

/** One page of a workspace's audit log, newest first (by `seq`, the chain's order, never by a clock). */
export async function listAuditPage({
  ctx,
  input,
}: {
  ctx: ServiceCtx;
  input: { workspaceId: string } & AuditFilter & PageRequest<number>;
}): Promise<RowPage<AuditEntry>> {
  const rows = await ctx.db
    .select()
    .from(auditEvents)
    .where(
      and(
        eq(auditEvents.workspaceId, input.workspaceId),
        input.after === undefined ? undefined : lt(auditEvents.seq, input.after),
        input.action === undefined ? undefined : eq(auditEvents.action, input.action),
        input.actor === undefined ? undefined : eq(auditEvents.actor, input.actor),
        input.target === undefined ? undefined : eq(auditEvents.target, input.target),
        input.outcome === undefined ? undefined : eq(auditEvents.outcome, input.outcome),
        input.since === undefined ? undefined : gte(auditEvents.at, input.since),
        input.until === undefined ? undefined : lt(auditEvents.at, input.until),
      ),
    )
    .orderBy(desc(auditEvents.seq))
    .limit(input.limit + 1);
  const page = cutPage(rows, input.limit);
  return { items: page.items.map(entryOf), more: page.more };
}

/**
 * A workspace's whole chain in `seq` order, `AUDIT_BATCH` entries a query. Entries are only ever appended, each
 * after the one before it committed (`audit()` holds the workspace's lock until then), so the batches read
 * one after the other are a prefix of the chain: what was appended while reading may or may not be in it.
 */
export async function* auditBatches({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string } }): AsyncGenerator<AuditEntry[]> {
  let after = 0;
  for (;;) {
    const rows = await ctx.db
      .select()
      .from(auditEvents)
      .where(and(eq(auditEvents.workspaceId, input.workspaceId), gt(auditEvents.seq, after)))
      .orderBy(asc(auditEvents.seq))
      .limit(AUDIT_BATCH);
    if (rows.length > 0) yield rows.map(entryOf);
    if (rows.length < AUDIT_BATCH) return;
    after = rows.at(-1)!.seq;
  }
}

/** Verifies a workspace's chain as stored (`verifyChain`), read a batch at a time and no further than a break. */
export async function verifyAuditChain({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string } }): Promise<ChainVerdict> {
  async function* entries() {
    for await (const batch of auditBatches({ ctx, input })) yield* batch;
  }
  return await verifyChain(entries());
}
