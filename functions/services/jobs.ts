import { and, desc, eq, isNull, lt, or, sql } from 'drizzle-orm';
import { deployments, files, jobs } from '../store/schema/index.js';
import { jobEndpoint, jobModel, JobSpec, type CommandSubmission, type JobSubmission, type JobView } from '../../shared/batch/job.js';
import { expireFileWithin } from './files.js';
import { loadWorkspacePolicy } from './workspace-policy.js';
import { requireResolvableRuntime } from './runtime-registry.js';
import { batchProgress } from '../../shared/batch/progress.js';
import { isId, newId } from '../../shared/ids.js';
import { ApiError } from '../kernel/errors.js';
import { cutPage, type PageRequest, type RowPage } from '../core/paging.js';
import { batchStatus, jobMove, type JobState } from '../core/jobs/states.js';
import { dbNow } from '../store/rows.js';
import { audit, withTransaction, type ServiceCtx, type ServicePorts } from './service-context.js';
import { JOBS_CHANNEL } from '../kernel/ports/bus.js';
import type { JobRow } from './job-runners.js';
import { instanceAlive } from './instances.js';
import { findSwarm, swarmModel } from './swarm-records.js';

/** A live input file of the workspace of one of `purposes`: its id; 404, or 400 for its purpose. Locked for share. */
export async function inputFile(tx: ServiceCtx, input: { workspaceId: string; fileId: string; purposes: readonly string[]; what: string }): Promise<string> {
  const [file] = isId('file', input.fileId)
    ? await tx.db
        .select({ id: files.id, purpose: files.purpose })
        .from(files)
        .where(and(eq(files.id, input.fileId), eq(files.workspaceId, input.workspaceId), isNull(files.deletedAt)))
        .for('share')
    : [];
  if (!file) throw new ApiError('not_found', `No such File object: ${input.fileId}`);
  if (!input.purposes.includes(file.purpose)) {
    throw new ApiError('bad_request', `the input file's purpose is ${file.purpose}, ${input.what} reads a file of purpose ${input.purposes.join(' or ')}`);
  }
  return file.id;
}

/**
 * The days a job's files are kept: the `filesDays` of the data class of the live deployment named `model` (a
 * deployment's name, as `/v1` routes it), by the workspace's policy; null when it names none, has no class, or its
 * class keeps files until deleted.
 */
async function dataClassFilesDays(tx: ServiceCtx, input: { workspaceId: string; model: string }): Promise<number | null> {
  if (input.model === '') return null;
  const [deployment] = await tx.db
    .select({ dataClass: deployments.dataClass })
    .from(deployments)
    .where(and(eq(deployments.workspaceId, input.workspaceId), eq(deployments.name, input.model), isNull(deployments.deletedAt)));
  if (!deployment?.dataClass) return null;
  const rule = (await loadWorkspacePolicy(tx.db, input.workspaceId)).dataClasses[deployment.dataClass];
  return rule?.filesDays ?? null;
}

/** Writes a new job of the workspace, audited as `job.create`; it expires `expiresInMs` from now, or never. */
export async function insertJob(
  tx: ServiceCtx,
  input: { workspaceId: string; spec: JobSpec; metadata?: Record<string, string> | null; expiresInMs?: number },
): Promise<JobRow> {
  // Its files' retention, from the data class of the deployment its model names (docs/jobs.md, "Retention"); its
  // input keeps no longer than that from now.
  const filesDays = await dataClassFilesDays(tx, { workspaceId: input.workspaceId, model: jobModel(input.spec) });
  if (filesDays !== null && input.spec.kind !== 'command') await expireFileWithin(tx, { fileId: input.spec.inputFileId, days: filesDays });
  const [row] = await tx.db
    .insert(jobs)
    .values({
      id: newId('job'),
      workspaceId: input.workspaceId,
      spec: input.spec,
      metadata: input.metadata ?? null,
      filesDays,
      expiresAt: input.expiresInMs === undefined ? null : sql`now() + make_interval(secs => ${input.expiresInMs / 1000})`,
    })
    .returning();
  const details =
    input.spec.kind === 'command'
      ? { kind: input.spec.kind, template: input.spec.command.template }
      : { kind: input.spec.kind, endpoint: jobEndpoint(input.spec), inputFileId: input.spec.inputFileId };
  await audit(tx, { workspaceId: input.workspaceId, action: 'job.create', target: row!.id, details });
  return row!;
}

/**
 * A workspace's job (of `kind` only, when given: the Batch API sees batches), or 404: another workspace's and an id
 * that is no job id alike.
 */
export async function findJob(ctx: ServiceCtx, input: { workspaceId: string; jobId: string; lock?: boolean; kind?: JobSpec['kind'] }): Promise<JobRow> {
  const query = ctx.db
    .select()
    .from(jobs)
    .where(and(eq(jobs.id, input.jobId), eq(jobs.workspaceId, input.workspaceId), input.kind ? sql`${jobs.spec}->>'kind' = ${input.kind}` : undefined));
  const [row] = isId('job', input.jobId) ? await (input.lock ? query.for('update') : query) : [];
  if (!row) throw new ApiError('not_found', `No such ${input.kind === 'openai-batch' ? 'batch' : 'job'}: ${input.jobId}`);
  return row;
}

/**
 * Cancels a job, audited as `job.cancel`: a running one is asked to stop (`cancelling`: its runner sends what it
 * finished and ends); one without a runner (not started, or between two attempts) is finalized at once. Either way
 * its output keeps the rows it finished. A job already ending answers 409 (`invalid_transition`).
 */
export async function cancelJobRow(ctx: ServiceCtx, input: { workspaceId: string; jobId: string; kind?: JobSpec['kind'] }): Promise<JobRow> {
  return await withTransaction(ctx, async (tx) => {
    const job = await findJob(tx, { ...input, lock: true });
    const from = job.state as JobState;
    const to: JobState = from === 'pending' ? 'finalizing' : 'cancelling';
    const move = from === 'finalizing' ? { refused: 'it is finalizing' } : jobMove(from, to);
    if ('refused' in move) throw new ApiError('invalid_transition', `Cannot cancel a job that is ${batchStatus(from)}: ${move.refused}`);
    const [row] = await tx.db
      .update(jobs)
      .set({ state: to, outcome: 'cancelled', reason: 'cancelled', cancellingAt: sql`now()`, ...(to === 'finalizing' ? { finalizingAt: sql`now()` } : {}) })
      .where(eq(jobs.id, job.id))
      .returning();
    await audit(tx, { workspaceId: input.workspaceId, action: 'job.cancel', target: job.id, details: { from } });
    return row!;
  });
}

const iso = (at: Date | null) => at?.toISOString() ?? null;

/** A job as the management API shows it, its rate and ETA from its samples as of `now`. */
function jobView(job: JobRow, now: Date): JobView {
  const progress = batchProgress({ samples: job.samples, total: job.totalRows, failed: job.failedRows, now: now.getTime() });
  return {
    id: job.id,
    kind: job.spec.kind,
    state: job.state as JobState,
    spec: job.spec,
    attempt: job.attempt,
    rows: { total: job.totalRows, succeeded: job.doneRows, failed: job.failedRows },
    rate: progress.rate,
    etaMs: progress.etaMs,
    outputFileId: job.outputFileId,
    errorFileId: job.errorFileId,
    reason: job.reason,
    createdAt: job.createdAt.toISOString(),
    startedAt: iso(job.startedAt),
    finishedAt: iso(job.finishedAt),
    expiresAt: iso(job.expiresAt),
  };
}

/**
 * Submits a built-in job (`POST /api/v1/jobs`): chat, completion or embedding rows of a live JSONL or Parquet file of
 * the workspace (purpose `batch` or `user_data`), sent to its model with its defaults. It has no completion window.
 * A job submitted to a swarm (404 when the workspace has none of that name) is counted as the swarm's (`swarm_id`),
 * and its model, backend, concurrency and attempts default to the swarm's.
 */
export async function submitJob({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'bus' | 'config'>;
  input: { workspaceId: string; submission: JobSubmission };
}): Promise<JobView> {
  const { submission } = input;
  const view = await withTransaction(ctx, async (tx) => {
    const swarm = submission.swarm === undefined ? null : await findSwarm(tx, { workspaceId: input.workspaceId, name: submission.swarm, lock: 'share' });
    const fileId = await inputFile(tx, { workspaceId: input.workspaceId, fileId: submission.inputFileId, purposes: ['batch', 'user_data'], what: 'a job' });
    const spec = JobSpec.parse({
      kind: 'rows',
      rows: { ...submission.rows, model: submission.rows.model ?? (swarm ? swarmModel(swarm) : undefined) },
      inputFileId: fileId,
      format: submission.format,
      retry: submission.retry,
      backend: submission.backend ?? swarm?.config.jobs.backend,
      concurrency: submission.concurrency ?? swarm?.config.jobs.concurrency,
      maxAttempts: submission.maxAttempts ?? swarm?.config.jobs.maxAttempts,
    });
    // No instance would ever start it: refused now rather than pending for good.
    if (spec.backend === 'slurm' && ctx.config.jobsSlurm === null) {
      throw new ApiError('bad_request', 'the slurm backend is not configured on this control plane (docs/jobs.md, "Slurm")');
    }
    const row = await insertJob(tx, { workspaceId: input.workspaceId, spec });
    if (swarm) await tx.db.update(jobs).set({ swarmId: swarm.id }).where(eq(jobs.id, row.id));
    return jobView(row, await dbNow(tx.db));
  });
  await signalJobsWaiting(ctx);
  return view;
}

/**
 * Submits a command job (`POST /api/v1/jobs/commands`): the user's own process, of a registered job template with its
 * parameters (400 when they do not resolve), run on the `agent` backend, where the node's local policy decides
 * whether it runs it. Its model (MODEL) defaults to its swarm's.
 */
export async function submitCommandJob({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'bus'>;
  input: { workspaceId: string; submission: CommandSubmission };
}): Promise<JobView> {
  const { submission } = input;
  const view = await withTransaction(ctx, async (tx) => {
    const swarm = submission.swarm === undefined ? null : await findSwarm(tx, { workspaceId: input.workspaceId, name: submission.swarm, lock: 'share' });
    const { template, params } = submission.command;
    await requireResolvableRuntime(tx.db, { workspaceId: input.workspaceId, runtime: { kind: 'template', template, params, env: {} } });
    const spec = JobSpec.parse({
      kind: 'command',
      command: { ...submission.command, model: submission.command.model ?? (swarm ? swarmModel(swarm) : '') },
      backend: 'agent',
      maxAttempts: submission.maxAttempts ?? swarm?.config.jobs.maxAttempts,
    });
    const row = await insertJob(tx, { workspaceId: input.workspaceId, spec });
    if (swarm) await tx.db.update(jobs).set({ swarmId: swarm.id }).where(eq(jobs.id, row.id));
    return jobView(row, await dbNow(tx.db));
  });
  await signalJobsWaiting(ctx);
  return view;
}

/** Tells every instance's backends that a job waits for a runner: they look now rather than at their next tick. */
export async function signalJobsWaiting(ctx: Pick<ServicePorts, 'bus'>): Promise<void> {
  await ctx.bus.publish(JOBS_CHANNEL, { type: 'jobs-waiting' });
}

export async function getJob({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string; jobId: string } }): Promise<JobView> {
  return jobView(await findJob(ctx, input), await dbNow(ctx.db));
}

/** One page of the workspace's jobs (batches included), newest first, after `after` (a job id). */
export async function listJobs({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string } & PageRequest<string> }): Promise<RowPage<JobView>> {
  const rows = await ctx.db
    .select()
    .from(jobs)
    .where(and(eq(jobs.workspaceId, input.workspaceId), input.after === undefined ? undefined : lt(jobs.id, input.after)))
    .orderBy(desc(jobs.id))
    .limit(input.limit + 1);
  const page = cutPage(rows, input.limit);
  const now = await dbNow(ctx.db);
  return { items: page.items.map((row) => jobView(row, now)), more: page.more };
}

/** `POST /api/v1/jobs/{id}/cancel`: any job of the workspace, cancelled (`cancelJobRow`). */
export async function cancelJob({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string; jobId: string } }): Promise<JobView> {
  const row = await cancelJobRow(ctx, input);
  return jobView(row, await dbNow(ctx.db));
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
