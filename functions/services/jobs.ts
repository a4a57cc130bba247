import { and, desc, eq, isNull, lt, or, sql } from 'drizzle-orm';
import { files, jobs } from '../store/schema/index.js';
import type { BatchCreateRequest, BatchList, BatchObject } from '../../shared/contracts/openai-batch.js';
import { JobSpec } from '../../shared/contracts/job.js';
import { isId, newId } from '../../shared/ids.js';
import { ApiError } from '../kernel/errors.js';
import { batchStatus, jobMove, type JobState } from '../core/jobs/states.js';
import { audit, withTransaction, type ServiceCtx } from './service-context.js';
import type { JobRow } from './job-runners.js';
import { instanceAlive } from './instances.js';

/** OpenAI's completion window, the only one it offers: a batch not done within it expires with what it finished. */
const COMPLETION_WINDOW_MS = 24 * 3_600_000;

const epochS = (at: Date | null) => (at ? Math.floor(at.getTime() / 1000) : null);

/** A job as the OpenAI Batch API shows a batch. */
function batchObject(job: JobRow): BatchObject {
  const state = job.state as JobState;
  return {
    id: job.id,
    object: 'batch',
    endpoint: job.spec.endpoint,
    errors: null,
    input_file_id: job.spec.inputFileId,
    completion_window: '24h',
    status: batchStatus(state),
    output_file_id: job.outputFileId,
    error_file_id: job.errorFileId,
    created_at: epochS(job.createdAt)!,
    in_progress_at: epochS(job.startedAt),
    expires_at: epochS(job.expiresAt),
    finalizing_at: epochS(job.finalizingAt),
    completed_at: state === 'completed' ? epochS(job.finishedAt) : null,
    failed_at: state === 'failed' ? epochS(job.finishedAt) : null,
    expired_at: state === 'expired' ? epochS(job.finishedAt) : null,
    cancelling_at: epochS(job.cancellingAt),
    cancelled_at: state === 'cancelled' ? epochS(job.finishedAt) : null,
    request_counts: { total: job.totalRows ?? job.doneRows + job.failedRows, completed: job.doneRows, failed: job.failedRows },
    metadata: job.metadata ?? null,
  };
}

/**
 * Creates a batch (`POST /v1/batches`): a job of kind `openai-batch` over a live `batch` file of the workspace, to
 * expire 24 hours from now. Its lines are checked by its runner as it reads them: a malformed line fails that row
 * (in the error file), never the batch. Audited as `job.create`.
 */
export async function createBatch({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string; request: BatchCreateRequest } }): Promise<BatchObject> {
  const { request } = input;
  return await withTransaction(ctx, async (tx) => {
    const [file] = isId('file', request.input_file_id)
      ? await tx.db
          .select({ id: files.id, purpose: files.purpose })
          .from(files)
          .where(and(eq(files.id, request.input_file_id), eq(files.workspaceId, input.workspaceId), isNull(files.deletedAt)))
          .for('share')
      : [];
    if (!file) throw new ApiError('not_found', `No such File object: ${request.input_file_id}`);
    if (file.purpose !== 'batch') throw new ApiError('bad_request', `the input file's purpose is ${file.purpose}, a batch reads a file of purpose batch`);
    const spec = JobSpec.parse({ kind: 'openai-batch', endpoint: request.endpoint, inputFileId: file.id });
    const [row] = await tx.db
      .insert(jobs)
      .values({
        id: newId('job'),
        workspaceId: input.workspaceId,
        spec,
        metadata: request.metadata ?? null,
        expiresAt: sql`now() + make_interval(secs => ${COMPLETION_WINDOW_MS / 1000})`,
      })
      .returning();
    await audit(tx, {
      workspaceId: input.workspaceId,
      action: 'job.create',
      target: row!.id,
      details: { kind: spec.kind, endpoint: spec.endpoint, inputFileId: file.id },
    });
    return batchObject(row!);
  });
}

/** A workspace's job, or 404: another workspace's and an id that is no job id alike. */
async function findJob(ctx: ServiceCtx, input: { workspaceId: string; jobId: string; lock?: boolean }): Promise<JobRow> {
  const query = ctx.db
    .select()
    .from(jobs)
    .where(and(eq(jobs.id, input.jobId), eq(jobs.workspaceId, input.workspaceId)));
  const [row] = isId('job', input.jobId) ? await (input.lock ? query.for('update') : query) : [];
  if (!row) throw new ApiError('not_found', `No such batch: ${input.jobId}`);
  return row;
}

export async function getBatch({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string; jobId: string } }): Promise<BatchObject> {
  return batchObject(await findJob(ctx, input));
}

/** One page of a workspace's batches, newest first, after `after` (a batch id) as OpenAI's cursor pages go. */
export async function listBatches({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string; after?: string; limit: number } }): Promise<BatchList> {
  const rows = await ctx.db
    .select()
    .from(jobs)
    .where(and(eq(jobs.workspaceId, input.workspaceId), input.after === undefined ? undefined : lt(jobs.id, input.after)))
    .orderBy(desc(jobs.id))
    .limit(input.limit + 1);
  const data = rows.slice(0, input.limit).map(batchObject);
  return { object: 'list', data, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null, has_more: rows.length > input.limit };
}

/**
 * Cancels a job, audited as `job.cancel`: a running one is asked to stop (`cancelling`: its runner sends what it
 * finished and ends); one without a runner (not started, or between two attempts) is finalized at once. Either way
 * its output keeps the rows it finished. A job already ending answers 409 (`invalid_transition`).
 */
export async function cancelJob({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string; jobId: string } }): Promise<BatchObject> {
  return await withTransaction(ctx, async (tx) => {
    const job = await findJob(tx, { ...input, lock: true });
    const from = job.state as JobState;
    const to: JobState = from === 'pending' ? 'finalizing' : 'cancelling';
    const move = from === 'finalizing' ? { refused: 'it is finalizing' } : jobMove(from, to);
    if ('refused' in move) throw new ApiError('invalid_transition', `Cannot cancel a batch that is ${batchStatus(from)}: ${move.refused}`);
    const [row] = await tx.db
      .update(jobs)
      .set({ state: to, outcome: 'cancelled', reason: 'cancelled', cancellingAt: sql`now()`, ...(to === 'finalizing' ? { finalizingAt: sql`now()` } : {}) })
      .where(eq(jobs.id, job.id))
      .returning();
    await audit(tx, { workspaceId: input.workspaceId, action: 'job.cancel', target: job.id, details: { from } });
    return batchObject(row!);
  });
}

/**
 * Ends the jobs whose completion window passed (OpenAI's `expired`), keeping what they finished: one without a
 * runner is finalized at once, a running one is asked to stop first (`cancelling`, towards `expired`). Returns how
 * many it moved.
 */
export async function expireJobs(ctx: ServiceCtx): Promise<number> {
  const idle = await ctx.db
    .update(jobs)
    .set({ state: 'finalizing', outcome: 'expired', reason: 'expired', finalizingAt: sql`now()` })
    .where(and(eq(jobs.state, 'pending'), lt(jobs.expiresAt, sql`now()`)))
    .returning({ id: jobs.id });
  const running = await ctx.db
    .update(jobs)
    .set({ state: 'cancelling', outcome: 'expired', reason: 'expired', cancellingAt: sql`now()` })
    .where(and(eq(jobs.state, 'running'), lt(jobs.expiresAt, sql`now()`)))
    .returning({ id: jobs.id });
  return idle.length + running.length;
}

/** Jobs finalizing that no live instance holds: left by a finalizing that never ended, or never started. */
export async function unclaimedFinalizing(ctx: ServiceCtx): Promise<string[]> {
  const rows = await ctx.db
    .select({ id: jobs.id })
    .from(jobs)
    .where(
      and(eq(jobs.state, 'finalizing'), or(isNull(jobs.leaseInstanceId), lt(jobs.leaseExpiresAt, sql`now()`), sql`not ${instanceAlive(jobs.leaseInstanceId)}`)),
    );
  return rows.map((r) => r.id);
}
