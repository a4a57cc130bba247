import { and, eq, sql } from 'drizzle-orm';
import { workloads } from '../store/schema/index.js';
import type { Db } from '../store/db.js';
import { column, iso } from '../store/rows.js';
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

/**
 * Writes workload rows in one statement: new ones are inserted, known ones take the newer state. Built from
 * column arrays (`unnest`) rather than drizzle's multi-row VALUES, whose per-value building cost more CPU
 * than the relay itself at a few hundred requests a second.
 */
export async function writeWorkloads(db: Db, rows: WorkloadRow[]): Promise<void> {
  await db.execute(sql`
    insert into workloads (id, workspace_id, deployment_id, kind, idempotency_key, state, instance_id, machine_id, attempts, status_code, error_code, deadline, created_at, finished_at)
    select * from unnest(
      ${column(rows, (r) => r.id)}::text[], ${column(rows, (r) => r.workspaceId)}::text[], ${column(rows, (r) => r.deploymentId)}::text[],
      ${column(rows, (r) => r.kind)}::text[], ${column(rows, (r) => r.idempotencyKey ?? null)}::text[], ${column(rows, (r) => r.state)}::text[],
      ${column(rows, (r) => r.instanceId)}::text[], ${column(rows, (r) => r.machineId ?? null)}::text[], ${column(rows, (r) => r.attempts ?? 0)}::int4[],
      ${column(rows, (r) => r.statusCode ?? null)}::int4[], ${column(rows, (r) => r.errorCode ?? null)}::text[], ${column(rows, (r) => iso(r.deadline))}::timestamptz[],
      ${column(rows, (r) => iso(r.createdAt) ?? new Date().toISOString())}::timestamptz[], ${column(rows, (r) => iso(r.finishedAt))}::timestamptz[]
    )
    on conflict (id) do update set
      state = excluded.state, machine_id = excluded.machine_id, attempts = excluded.attempts,
      status_code = excluded.status_code, error_code = excluded.error_code, finished_at = excluded.finished_at`);
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
