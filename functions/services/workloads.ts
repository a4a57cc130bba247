import { and, desc, eq, gt, inArray, lt, notInArray, sql } from 'drizzle-orm';
import { deployments, machines, workloads } from '../store/schema/index.js';
import type { Db } from '../store/db.js';
import { column, iso } from '../store/rows.js';
import { audit, withTransaction, type ServiceCtx, type ServicePorts } from './service-context.js';
import { instanceAlive } from './instances.js';

export type WorkloadState = 'accepted' | 'running' | 'succeeded' | 'failed' | 'cancelled';

/**
 * Records a workload. With an Idempotency-Key the insert is the guard: false when the same token used the key
 * before (on any instance, before or after a restart), so the request must not execute again. A key is scoped to
 * the token and the key (docs/design.md section 5): another token's use of it is another request, and learns
 * nothing of this one.
 */
export async function recordWorkload({ ctx, input }: { ctx: ServiceCtx; input: WorkloadRow }): Promise<boolean> {
  const inserted = await ctx.db.insert(workloads).values(input).onConflictDoNothing().returning({ id: workloads.id });
  return inserted.length === 1;
}

/** The workload a token's Idempotency-Key already names. */
export async function workloadByKey({ ctx, input }: { ctx: ServiceCtx; input: { tokenId: string; idempotencyKey: string } }) {
  const [row] = await ctx.db
    .select()
    .from(workloads)
    .where(and(eq(workloads.tokenId, input.tokenId), eq(workloads.idempotencyKey, input.idempotencyKey)));
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
    insert into workloads (id, workspace_id, deployment_id, kind, idempotency_key, state, instance_id, machine_id, attempts, status_code, error_code, deadline, created_at, finished_at,
      token_id, model, prompt_tokens, completion_tokens, first_byte_ms, data_class, version_id, track)
    select * from unnest(
      ${column(rows, (r) => r.id)}::text[], ${column(rows, (r) => r.workspaceId)}::text[], ${column(rows, (r) => r.deploymentId)}::text[],
      ${column(rows, (r) => r.kind)}::text[], ${column(rows, (r) => r.idempotencyKey ?? null)}::text[], ${column(rows, (r) => r.state)}::text[],
      ${column(rows, (r) => r.instanceId)}::text[], ${column(rows, (r) => r.machineId ?? null)}::text[], ${column(rows, (r) => r.attempts ?? 0)}::int4[],
      ${column(rows, (r) => r.statusCode ?? null)}::int4[], ${column(rows, (r) => r.errorCode ?? null)}::text[], ${column(rows, (r) => iso(r.deadline))}::timestamptz[],
      ${column(rows, (r) => iso(r.createdAt) ?? new Date().toISOString())}::timestamptz[], ${column(rows, (r) => iso(r.finishedAt))}::timestamptz[],
      ${column(rows, (r) => r.tokenId ?? null)}::text[], ${column(rows, (r) => r.model ?? null)}::text[], ${column(rows, (r) => r.promptTokens ?? null)}::int4[],
      ${column(rows, (r) => r.completionTokens ?? null)}::int4[], ${column(rows, (r) => r.firstByteMs ?? null)}::int4[],
      ${column(rows, (r) => r.dataClass ?? null)}::text[], ${column(rows, (r) => r.versionId ?? null)}::text[], ${column(rows, (r) => r.track ?? null)}::text[]
    )
    on conflict (id) do update set
      state = excluded.state, machine_id = excluded.machine_id, attempts = excluded.attempts,
      status_code = excluded.status_code, error_code = excluded.error_code, finished_at = excluded.finished_at,
      token_id = excluded.token_id, model = excluded.model, prompt_tokens = excluded.prompt_tokens,
      completion_tokens = excluded.completion_tokens, first_byte_ms = excluded.first_byte_ms,
      version_id = excluded.version_id, track = excluded.track`);
}

export async function getWorkload({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string; id: string } }) {
  const [row] = await ctx.db
    .select()
    .from(workloads)
    .where(and(eq(workloads.id, input.id), eq(workloads.workspaceId, input.workspaceId)));
  return row;
}

/** A workload is orphaned when it never finished and the instance that held it is gone. */
const orphaned = sql`${workloads.state} in ('accepted', 'running') and not ${instanceAlive(workloads.instanceId)}`;

/**
 * Workloads whose holder died (crash, SIGKILL, lost store) can never finish: they failed, `holder_lost`. The
 * agents that ran them aborted the runtime calls when their stream to that instance broke.
 */
export async function sweepOrphanedWorkloads({ ctx }: { ctx: ServiceCtx }): Promise<number> {
  const swept = await ctx.db
    .update(workloads)
    .set({ state: 'failed', errorCode: 'holder_lost', finishedAt: sql`now()` })
    .where(orphaned)
    .returning({ id: workloads.id });
  return swept.length;
}

/**
 * Deletes the finished workloads created more than `retentionDays` ago, oldest first, at most `batchSize` a
 * statement and `maxBatches` statements a call (the controller tick's share; what is left waits for the next
 * tick); how many it deleted. Unfinished ones stay: the orphan sweep ends them first.
 */
export async function sweepExpiredWorkloads({
  ctx,
  input,
}: {
  ctx: ServiceCtx;
  input: { retentionDays: number; batchSize: number; maxBatches: number };
}): Promise<number> {
  let deleted = 0;
  for (let batch = 0; batch < input.maxBatches; batch++) {
    const expired = ctx.db
      .select({ id: workloads.id })
      .from(workloads)
      .where(and(lt(workloads.createdAt, sql`now() - make_interval(days => ${input.retentionDays})`), notInArray(workloads.state, ['accepted', 'running'])))
      .orderBy(workloads.createdAt)
      .limit(input.batchSize);
    const rows = await ctx.db.delete(workloads).where(inArray(workloads.id, expired)).returning({ id: workloads.id });
    deleted += rows.length;
    if (rows.length < input.batchSize) break;
  }
  return deleted;
}

/** The error code a running workload carries between a cancel request and its holder's final record. */
export const CANCEL_REQUESTED = 'cancel_requested';

/**
 * Records a cancel request on a running workload before it is signalled, so that an instance whose bus missed the
 * signal (a reconnect) still finds it when it re-reads (`functions/dataplane/resync.ts`). The workload stays running
 * until its holder records how it ended, which replaces the mark.
 */
async function recordCancelRequest({ ctx, input }: { ctx: ServiceCtx; input: { id: string } }): Promise<void> {
  await ctx.db
    .update(workloads)
    .set({ errorCode: CANCEL_REQUESTED })
    .where(and(eq(workloads.id, input.id), eq(workloads.state, 'running')));
}

/**
 * Records a cancel of a running workload (`workload.cancel`, in the name of the token that cancels, the workload's
 * id as target, its deployment and the token whose request it is in `details`): cancelling cuts another client's
 * answer, so who did it is kept. When this instance does not hold it, the mark its holder finds (`CANCEL_REQUESTED`,
 * as `recordCancelRequest`) is written in the same transaction; the caller signals the holder once it committed.
 */
export async function cancelWorkload({
  ctx,
  input,
}: {
  ctx: ServiceCtx;
  input: { workspaceId: string; id: string; deploymentId: string; tokenId: string | null; heldHere: boolean };
}): Promise<void> {
  await withTransaction(ctx, async (tx) => {
    if (!input.heldHere) await recordCancelRequest({ ctx: tx, input: { id: input.id } });
    await audit(tx, {
      workspaceId: input.workspaceId,
      action: 'workload.cancel',
      target: input.id,
      details: { deploymentId: input.deploymentId, tokenId: input.tokenId, held: input.heldHere ? 'here' : 'elsewhere' },
    });
  });
}

/** Marks one workload orphaned if its holder is gone; true when it was (the caller cannot reach it). */
export async function sweepIfOrphaned({ ctx, input }: { ctx: ServiceCtx; input: { id: string } }): Promise<boolean> {
  const swept = await ctx.db
    .update(workloads)
    .set({ state: 'failed', errorCode: 'holder_lost', finishedAt: sql`now()` })
    .where(and(eq(workloads.id, input.id), orphaned))
    .returning({ id: workloads.id });
  return swept.length === 1;
}

/**
 * A token's Idempotency-Key whose workload is known not to have finished (its holder died) may run again, once:
 * the row is taken over atomically by the same token's retrying request, which gets its id. Null when the key's workload
 * finished, or runs on a live instance, or another retry took it first: then it must not execute again.
 */
export async function retakeOrphanedWorkload({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'instanceId'>;
  input: { tokenId: string; idempotencyKey: string; deadline: Date };
}): Promise<string | null> {
  const [row] = await ctx.db
    .update(workloads)
    .set({ state: 'running', instanceId: ctx.instanceId, errorCode: null, statusCode: null, finishedAt: null, attempts: 0, deadline: input.deadline })
    .where(
      and(
        eq(workloads.tokenId, input.tokenId),
        eq(workloads.idempotencyKey, input.idempotencyKey),
        sql`((${workloads.state} = 'failed' and ${workloads.errorCode} = 'holder_lost') or (${orphaned}))`,
      ),
    )
    .returning({ id: workloads.id });
  return row?.id ?? null;
}

/** A recent inference request, as the workloads table records it (no payload is ever kept). */
export interface RecentRequest {
  id: string;
  kind: string;
  model: string | null;
  deploymentName: string | null;
  machineName: string | null;
  state: string;
  statusCode: number | null;
  errorCode: string | null;
  createdAt: Date;
  finishedAt: Date | null;
  firstByteMs: number | null;
  promptTokens: number | null;
  completionTokens: number | null;
}

/** The newest requests of the workspace in the last `windowMinutes`, newest first (at most `limit`), with their deployment's and machine's names. */
export async function recentRequests({
  ctx,
  input,
}: {
  ctx: ServiceCtx;
  input: { workspaceId: string; windowMinutes: number; limit: number };
}): Promise<RecentRequest[]> {
  return await ctx.db
    .select({
      id: workloads.id,
      kind: workloads.kind,
      model: workloads.model,
      deploymentName: deployments.name,
      machineName: machines.name,
      state: workloads.state,
      statusCode: workloads.statusCode,
      errorCode: workloads.errorCode,
      createdAt: workloads.createdAt,
      finishedAt: workloads.finishedAt,
      firstByteMs: workloads.firstByteMs,
      promptTokens: workloads.promptTokens,
      completionTokens: workloads.completionTokens,
    })
    .from(workloads)
    .leftJoin(deployments, eq(deployments.id, workloads.deploymentId))
    .leftJoin(machines, eq(machines.id, workloads.machineId))
    // The (workspace_id, created_at) index serves this.
    .where(and(eq(workloads.workspaceId, input.workspaceId), gt(workloads.createdAt, sql`now() - make_interval(mins => ${input.windowMinutes})`)))
    .orderBy(desc(workloads.createdAt))
    .limit(input.limit);
}
