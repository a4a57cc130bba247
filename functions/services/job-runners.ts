import { and, asc, eq, isNull, lt, or, sql } from 'drizzle-orm';
import { apiTokens, jobs, runs, runWorkers } from '../store/schema/index.js';
import { jobModel, type JobBackend } from '../../shared/batch/job.js';
import { ApiError } from '../kernel/errors.js';
import { afterRunner, type JobState, type RunnerEnd } from '../core/jobs/states.js';
import { createApiToken, signalTokensRevoked } from './api-tokens.js';
import { withTransaction, type ServiceCtx, type ServicePorts } from './service-context.js';
import { instanceAlive } from './instances.js';

export type JobRow = typeof jobs.$inferSelect;

/** A job a backend starts a runner for: its row, and the token the runner calls the control plane with (shown here only). */
export interface RunnerStart {
  job: JobRow;
  /** Null for a backend whose runner asks for its token when it starts (`mintRunnerToken`). */
  token: string | null;
}

/** An API token of role `inference` for the runner of a job's attempt: it calls `/v1` and its own job's runner routes. */
async function mintRunnerToken(tx: ServiceCtx, job: JobRow): Promise<{ id: string; token: string }> {
  return await createApiToken({
    ctx: tx,
    input: {
      workspaceId: job.workspaceId,
      name: `runner of ${job.id}, attempt ${job.attempt}`,
      role: 'inference',
      ...(job.expiresAt ? { expiresAt: job.expiresAt.toISOString() } : {}),
    },
  });
}

/** Revokes the token a job's runner held (its callers signal the revocation once their transaction commits). */
async function revokeRunnerToken(tx: ServiceCtx, tokenId: string): Promise<void> {
  await tx.db
    .update(apiTokens)
    .set({ revokedAt: sql`now()` })
    .where(and(eq(apiTokens.id, tokenId), isNull(apiTokens.revokedAt)));
}

/**
 * Takes the oldest pending job of backend `backend` for this instance (docs/jobs.md, "Backends"): it moves to
 * `running` under a lease of `leaseMs`; with `mintToken`, its attempt's runner gets an API token now (it expires with
 * the job), else the runner asks for one when it starts. Null when none waits. Two instances never take the same
 * job: the row is locked and skipped by the other.
 */
export async function claimJob({
  ctx,
  input,
}: {
  ctx: ServiceCtx;
  input: { backend: JobBackend; instanceId: string; leaseMs: number; mintToken: boolean };
}): Promise<RunnerStart | null> {
  return await withTransaction(ctx, async (tx) => {
    const [job] = await tx.db
      .select()
      .from(jobs)
      .where(and(eq(jobs.state, 'pending'), sql`${jobs.spec}->>'backend' = ${input.backend}`))
      .orderBy(asc(jobs.createdAt), asc(jobs.id))
      .limit(1)
      .for('update', { skipLocked: true });
    if (!job) return null;
    const minted = input.mintToken ? await mintRunnerToken(tx, job) : null;
    const [claimed] = await tx.db
      .update(jobs)
      .set({
        state: 'running',
        runnerTokenId: minted?.id ?? null,
        handle: null,
        leaseInstanceId: input.instanceId,
        leaseExpiresAt: sql`now() + make_interval(secs => ${input.leaseMs / 1000})`,
        startedAt: sql`coalesce(${jobs.startedAt}, now())`,
      })
      .where(eq(jobs.id, job.id))
      .returning();
    return { job: claimed!, token: minted?.token ?? null };
  });
}

/** Records what the backend calls attempt `attempt`'s runner, so that an instance taking the job over finds it. */
export async function setJobHandle(ctx: ServiceCtx, input: { jobId: string; attempt: number; handle: string }): Promise<void> {
  await ctx.db
    .update(jobs)
    .set({ handle: input.handle })
    .where(and(eq(jobs.id, input.jobId), eq(jobs.attempt, input.attempt)));
}

/**
 * Takes over a job whose holder was lost while its runner may still run (a durable backend's): this instance holds
 * it from now on, under a lease of `leaseMs`, if it is still running attempt `attempt` and its lease still lapsed
 * (another instance may have taken it meanwhile: then false).
 */
export async function adoptJob({
  ctx,
  input,
}: {
  ctx: ServiceCtx;
  input: { jobId: string; attempt: number; instanceId: string; leaseMs: number };
}): Promise<boolean> {
  const adopted = await ctx.db
    .update(jobs)
    .set({ leaseInstanceId: input.instanceId, leaseExpiresAt: sql`now() + make_interval(secs => ${input.leaseMs / 1000})` })
    .where(and(eq(jobs.id, input.jobId), eq(jobs.attempt, input.attempt), or(eq(jobs.state, 'running'), eq(jobs.state, 'cancelling')), lapsed))
    .returning({ id: jobs.id });
  return adopted.length > 0;
}

/**
 * The runner's token, asked for by the agent starting it (the `agent` backend): only by the machine that holds the
 * worker of attempt `attempt` of the run that is the job's current runner, else 404. The previous token the job's
 * runner held is revoked (an earlier start of this worker), so one token at a time calls for the job. Returns the
 * token and the job's model (a script's MODEL; empty for a batch of several).
 */
export async function grantRunnerToken({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'bus'>;
  input: { machineId: string; jobId: string; workerId: string; attempt: number };
}): Promise<{ token: string; model: string }> {
  const granted = await withTransaction(ctx, async (tx) => {
    const [job] = await tx.db.select().from(jobs).where(eq(jobs.id, input.jobId)).for('update');
    const live = job && job.spec.backend === 'agent' && (job.state === 'running' || job.state === 'cancelling') && job.handle !== null;
    const [worker] = live
      ? await tx.db
          .select({ id: runWorkers.id })
          .from(runWorkers)
          .innerJoin(runs, eq(runs.id, runWorkers.runId))
          .where(
            and(
              eq(runWorkers.id, input.workerId),
              eq(runWorkers.runId, job.handle!),
              eq(runs.jobId, job.id),
              eq(runWorkers.machineId, input.machineId),
              eq(runWorkers.attempt, input.attempt),
              isNull(runWorkers.releasedAt),
            ),
          )
      : [];
    if (!job || !worker) throw new ApiError('not_found', `no runner of job ${input.jobId} runs as worker ${input.workerId} on this machine`);
    const revoked = job.runnerTokenId !== null;
    if (revoked) await revokeRunnerToken(tx, job.runnerTokenId!);
    const minted = await mintRunnerToken(tx, job);
    await tx.db.update(jobs).set({ runnerTokenId: minted.id }).where(eq(jobs.id, job.id));
    return { token: minted.token, model: jobModel(job.spec), revoked };
  });
  if (granted.revoked) await signalTokensRevoked(ctx);
  return { token: granted.token, model: granted.model };
}

/** Keeps this instance's hold on a job whose runner it runs; false once the job is no longer its (then it stops it). */
export async function renewJobLease({
  ctx,
  input,
}: {
  ctx: ServiceCtx;
  input: { jobId: string; attempt: number; instanceId: string; leaseMs: number };
}): Promise<boolean> {
  const renewed = await ctx.db
    .update(jobs)
    .set({ leaseExpiresAt: sql`now() + make_interval(secs => ${input.leaseMs / 1000})` })
    .where(
      and(
        eq(jobs.id, input.jobId),
        eq(jobs.attempt, input.attempt),
        eq(jobs.leaseInstanceId, input.instanceId),
        or(eq(jobs.state, 'running'), eq(jobs.state, 'cancelling')),
      ),
    )
    .returning({ id: jobs.id });
  return renewed.length > 0;
}

/** What the end of an attempt led to: the job starts again, or is now `finalizing`, or the attempt was not current. */
export type AttemptOutcome = 'restart' | 'finalize' | 'stale';

/**
 * Ends attempt `attempt` of a job as its backend saw it end (`afterRunner`): its runner's token is revoked, then the
 * job starts again from its checkpoint (`pending`, the next attempt) or moves to `finalizing` towards its outcome
 * (`completed`; `failed` with why; `cancelled` or `expired` when it was asked to stop). An attempt that is not the
 * job's current one, or of a job no longer running, changes nothing (`stale`). Finalizing is the caller's next step.
 */
export async function endRunnerAttempt({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'bus'>;
  input: { jobId: string; attempt: number; end: RunnerEnd };
}): Promise<AttemptOutcome> {
  const outcome = await withTransaction(ctx, async (tx): Promise<AttemptOutcome> => {
    const [job] = await tx.db.select().from(jobs).where(eq(jobs.id, input.jobId)).for('update');
    if (!job || job.attempt !== input.attempt || (job.state !== 'running' && job.state !== 'cancelling')) return 'stale';
    if (job.runnerTokenId) await revokeRunnerToken(tx, job.runnerTokenId);
    // A command is done when its process exits 0; a runner, once every row of its input is.
    const finished = job.spec.kind === 'command' || (job.totalRows !== null && job.doneRows + job.failedRows >= job.totalRows);
    const end: RunnerEnd = finished && input.end.kind === 'exited' && input.end.code === 0 ? { kind: 'done' } : input.end;
    const decision = afterRunner({ state: job.state as JobState, attempt: job.attempt, maxAttempts: job.spec.maxAttempts, end });
    const released = { runnerTokenId: null, handle: null, leaseInstanceId: null, leaseExpiresAt: null };
    if (decision.next === 'restart') {
      await tx.db
        .update(jobs)
        .set({ ...released, state: 'pending', attempt: job.attempt + 1 })
        .where(eq(jobs.id, job.id));
      return 'restart';
    }
    // A cancelling job already says its outcome (`cancelled`, or `expired`).
    const ending =
      job.state === 'cancelling' ? {} : decision.next === 'fail' ? { outcome: 'failed', reason: decision.reason } : { outcome: 'completed', reason: null };
    await tx.db
      .update(jobs)
      .set({ ...released, ...ending, state: 'finalizing', finalizingAt: sql`now()` })
      .where(eq(jobs.id, job.id));
    return 'finalize';
  });
  if (outcome !== 'stale') await signalTokensRevoked(ctx);
  return outcome;
}

/** A lease that lapsed, or whose instance is no longer alive. */
const lapsed = or(lt(jobs.leaseExpiresAt, sql`now()`), sql`not ${instanceAlive(jobs.leaseInstanceId)}`);

/**
 * Jobs whose holder was lost: `running` or `cancelling` under a lease that lapsed, or held by an instance that is no
 * longer alive, with their backend and their runner's handle. A `local` runner died with its host: the attempt ends
 * as `lost` (`endRunnerAttempt`) and starts again from its checkpoint; a durable backend's runner may still run: an
 * instance with that backend adopts it (`adoptJob`).
 */
export async function lostJobs(ctx: ServiceCtx): Promise<Array<{ id: string; attempt: number; backend: JobBackend; handle: string | null }>> {
  const rows = await ctx.db
    .select({ id: jobs.id, attempt: jobs.attempt, spec: jobs.spec, handle: jobs.handle })
    .from(jobs)
    .where(and(or(eq(jobs.state, 'running'), eq(jobs.state, 'cancelling')), lapsed));
  return rows.map((r) => ({ id: r.id, attempt: r.attempt, backend: r.spec.backend, handle: r.handle }));
}
