import { and, desc, eq, lt, sql } from 'drizzle-orm';
import { jobs } from '../store/schema/index.js';
import type { BatchCreateRequest, BatchList, BatchObject } from '../../shared/contracts/openai-batch.js';
import { JobSpec } from '../../shared/batch/job.js';
import { batchStatus, type JobState } from '../core/jobs/states.js';
import { withTransaction, type ServiceCtx, type ServicePorts } from './service-context.js';
import type { JobRow } from './job-runners.js';
import { cancelJobRow, findJob, inputFile, insertJob, signalJobsWaiting } from './jobs.js';

/** OpenAI's completion window, the only one it offers: a batch not done within it expires with what it finished. */
const COMPLETION_WINDOW_MS = 24 * 3_600_000;

const epochS = (at: Date | null) => (at ? Math.floor(at.getTime() / 1000) : null);

/** A job as the OpenAI Batch API shows a batch. */
function batchObject(job: JobRow): BatchObject {
  const state = job.state as JobState;
  // findJob's kind filter: the Batch API reads batches only.
  if (job.spec.kind !== 'openai-batch') throw new Error(`job ${job.id} is no batch`);
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
 * (in the error file), never the batch.
 */
export async function createBatch({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'bus'>;
  input: { workspaceId: string; request: BatchCreateRequest };
}): Promise<BatchObject> {
  const { request } = input;
  const batch = await withTransaction(ctx, async (tx) => {
    const fileId = await inputFile(tx, { workspaceId: input.workspaceId, fileId: request.input_file_id, purposes: ['batch'], what: 'a batch' });
    const spec = JobSpec.parse({ kind: 'openai-batch', endpoint: request.endpoint, inputFileId: fileId });
    return batchObject(await insertJob(tx, { workspaceId: input.workspaceId, spec, metadata: request.metadata, expiresInMs: COMPLETION_WINDOW_MS }));
  });
  await signalJobsWaiting(ctx);
  return batch;
}

export async function getBatch({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string; jobId: string } }): Promise<BatchObject> {
  return batchObject(await findJob(ctx, { ...input, kind: 'openai-batch' }));
}

/** One page of a workspace's batches, newest first, after `after` (a batch id) as OpenAI's cursor pages go. */
export async function listBatches({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string; after?: string; limit: number } }): Promise<BatchList> {
  const rows = await ctx.db
    .select()
    .from(jobs)
    .where(
      and(
        eq(jobs.workspaceId, input.workspaceId),
        sql`${jobs.spec}->>'kind' = 'openai-batch'`,
        input.after === undefined ? undefined : lt(jobs.id, input.after),
      ),
    )
    .orderBy(desc(jobs.id))
    .limit(input.limit + 1);
  const data = rows.slice(0, input.limit).map(batchObject);
  return { object: 'list', data, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null, has_more: rows.length > input.limit };
}

/** `POST /v1/batches/{id}/cancel`: a batch, cancelled (`cancelJobRow`). */
export async function cancelBatch({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string; jobId: string } }): Promise<BatchObject> {
  return batchObject(await cancelJobRow(ctx, { ...input, kind: 'openai-batch' }));
}
