import { and, eq, sql } from 'drizzle-orm';
import { workloads } from '../store/schema/index.js';
import type { Db } from '../store/db.js';
import type { ServiceCtx } from './service-context.js';

export type WorkloadState = 'accepted' | 'running' | 'succeeded' | 'failed' | 'cancelled';

/**
 * Records a workload. With an Idempotency-Key the insert is the guard: false when the key was used before in
 * this workspace (by any instance, before or after a restart), so the request must not execute again.
 */
export async function recordWorkload({ ctx, input }: { ctx: ServiceCtx; input: WorkloadRow }): Promise<boolean> {
  const inserted = await ctx.db
    .insert(workloads)
    .values(input)
    .onConflictDoNothing()
    .returning({ id: workloads.id });
  return inserted.length === 1;
}

/** The workload an Idempotency-Key already names. */
export async function workloadByKey({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string; idempotencyKey: string } }) {
  const [row] = await ctx.db
    .select()
    .from(workloads)
    .where(and(eq(workloads.workspaceId, input.workspaceId), eq(workloads.idempotencyKey, input.idempotencyKey)));
  return row;
}

/** A workload row as the relay writes it behind (`WriteBehind`): whole, so the latest state replaces the row. */
export type WorkloadRow = typeof workloads.$inferInsert & { state: WorkloadState };

/** Writes workload rows in one statement: new ones are inserted, known ones take the newer state. */
export async function writeWorkloads(db: Db, rows: WorkloadRow[]): Promise<void> {
  await db
    .insert(workloads)
    .values(rows)
    .onConflictDoUpdate({
      target: workloads.id,
      set: {
        state: sql`excluded.state`,
        machineId: sql`excluded.machine_id`,
        attempts: sql`excluded.attempts`,
        statusCode: sql`excluded.status_code`,
        errorCode: sql`excluded.error_code`,
        finishedAt: sql`excluded.finished_at`,
      },
    });
}

export async function getWorkload({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string; id: string } }) {
  const [row] = await ctx.db.select().from(workloads).where(and(eq(workloads.id, input.id), eq(workloads.workspaceId, input.workspaceId)));
  return row;
}

/** Workloads a previous life of this control plane left running: they can never finish, so they failed. */
export async function abandonStaleWorkloads({ ctx }: { ctx: ServiceCtx }): Promise<void> {
  await ctx.db
    .update(workloads)
    .set({ state: 'failed', errorCode: 'control_plane_restarted', finishedAt: sql`now()` })
    .where(and(eq(workloads.state, 'running'), sql`${workloads.deadline} < now()`));
}
