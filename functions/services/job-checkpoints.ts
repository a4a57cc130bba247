import { and, asc, eq } from 'drizzle-orm';
import { jobParts, jobs } from '../store/schema/index.js';
import { addRows, count, has } from '../../shared/batch/checkpoint.js';
import type { RunnerCheckpoint, RunnerCheckpointAnswer, RunnerDone, RunnerJob } from '../../shared/batch/job.js';
import { isId } from '../../shared/ids.js';
import { ApiError } from '../kernel/errors.js';
import { checkedDataKey } from '../kernel/ports/object-store.js';
import { withTransaction, type ServiceCtx } from './service-context.js';
import { dbNow } from '../store/rows.js';
import type { JobRow } from './job-runners.js';
import { fileStore, type FilesCtx } from './files.js';

/** Progress samples kept per job, newest last: enough for a rate over the last minutes (`shared/batch/progress.ts`). */
const SAMPLES_KEPT = 30;

/** Where part `seq` of a job's results lives in the artifact store. */
export function jobPartKey(job: Pick<JobRow, 'workspaceId' | 'id'>, seq: number): string {
  return checkedDataKey(`_data/${job.workspaceId}/jobs/${job.id}/part-${seq}`);
}

/**
 * The job a runner's token may act for: the job's current runner token, the job running (or asked to stop).
 * Another job's id, or a token of an earlier attempt, is 404: a runner learns nothing of jobs not its own.
 */
async function runnersJob(ctx: ServiceCtx, input: { jobId: string; tokenId: string; lock?: boolean }): Promise<JobRow> {
  const query = ctx.db
    .select()
    .from(jobs)
    .where(and(eq(jobs.id, input.jobId), eq(jobs.runnerTokenId, input.tokenId)));
  const [job] = isId('job', input.jobId) ? await (input.lock ? query.for('update') : query) : [];
  if (!job || (job.state !== 'running' && job.state !== 'cancelling')) throw new ApiError('not_found', `no job ${input.jobId} runs with this token`);
  return job;
}

/** What a runner starts from: its job, its attempt, the rows already done, and whether it is asked to stop. */
export async function runnerJob({ ctx, input }: { ctx: ServiceCtx; input: { jobId: string; tokenId: string } }): Promise<RunnerJob> {
  const job = await runnersJob(ctx, input);
  return { id: job.id, attempt: job.attempt, spec: job.spec, done: job.done, cancel: job.state === 'cancelling' };
}

function refuseStaleAttempt(job: JobRow, attempt: number) {
  if (attempt !== job.attempt) throw new ApiError('conflict', `attempt ${attempt} is not the job's current one (${job.attempt})`);
}

/**
 * Keeps a checkpoint of a runner: the results of rows not done yet are written to the artifact store as one part,
 * sorted by row (a row sent twice keeps its first result: one line per row, never two), then counted as done, with
 * a progress sample. Rows done already (sent again by a later attempt after the earlier one's checkpoint was
 * kept) are dropped and counted as duplicates. The answer says whether the job is asked to stop.
 */
export async function acceptCheckpoint({
  ctx,
  input,
}: {
  ctx: FilesCtx;
  input: { jobId: string; tokenId: string; checkpoint: RunnerCheckpoint };
}): Promise<RunnerCheckpointAnswer> {
  const store = fileStore(ctx);
  return await withTransaction(ctx, async (tx) => {
    const job = await runnersJob(tx, { ...input, lock: true });
    refuseStaleAttempt(job, input.checkpoint.attempt);
    const seen = new Set<number>();
    const fresh = input.checkpoint.results
      .filter((r) => {
        if (has(job.done, r.row) || seen.has(r.row)) return false;
        seen.add(r.row);
        return true;
      })
      .sort((a, b) => a.row - b.row);
    const answer = { accepted: fresh.length, duplicates: input.checkpoint.results.length - fresh.length, cancel: job.state === 'cancelling' };
    if (fresh.length === 0) return answer;
    const seq = job.parts;
    const key = jobPartKey(job, seq);
    const text = `${fresh.map((r) => JSON.stringify(r)).join('\n')}\n`;
    // The job's row lock is held while its part is written: a runner's checkpoints are one after another anyway.
    await store.putObject(key, new Blob([text]).stream(), { maxBytes: Number.MAX_SAFE_INTEGER });
    const failed = fresh.filter((r) => !r.ok).length;
    const done = addRows(
      job.done,
      fresh.map((r) => r.row),
    );
    const finished = count(done);
    await tx.db.insert(jobParts).values({
      jobId: job.id,
      seq,
      objectKey: key,
      rows: fresh.length,
      failedRows: failed,
      firstRow: fresh[0]!.row,
      lastRow: fresh.at(-1)!.row,
    });
    await tx.db
      .update(jobs)
      .set({
        done,
        parts: seq + 1,
        doneRows: job.doneRows + fresh.length - failed,
        failedRows: job.failedRows + failed,
        samples: [...job.samples, { at: (await dbNow(tx.db)).getTime(), done: finished }].slice(-SAMPLES_KEPT),
      })
      .where(eq(jobs.id, job.id));
    return answer;
  });
}

/** The runner read its whole input: the job learns how many rows it holds (its progress's total). */
export async function acceptRunnerDone({
  ctx,
  input,
}: {
  ctx: ServiceCtx;
  input: { jobId: string; tokenId: string; done: RunnerDone };
}): Promise<{ totalRows: number; finished: number }> {
  return await withTransaction(ctx, async (tx) => {
    const job = await runnersJob(tx, { ...input, lock: true });
    refuseStaleAttempt(job, input.done.attempt);
    await tx.db.update(jobs).set({ totalRows: input.done.totalRows }).where(eq(jobs.id, job.id));
    return { totalRows: input.done.totalRows, finished: count(job.done) };
  });
}

/** A job's parts in the order they were written. */
export async function jobPartsOf(ctx: ServiceCtx, jobId: string) {
  return await ctx.db.select().from(jobParts).where(eq(jobParts.jobId, jobId)).orderBy(asc(jobParts.seq));
}

/** Forgets a job's parts once its output holds them: their objects, then their rows. */
export async function dropJobParts(ctx: FilesCtx, jobId: string): Promise<void> {
  const store = fileStore(ctx);
  for (const part of await jobPartsOf(ctx, jobId)) await store.deleteObject(part.objectKey);
  await ctx.db.delete(jobParts).where(eq(jobParts.jobId, jobId));
}
