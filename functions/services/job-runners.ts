import { and, asc, eq, isNull, lt, or, sql } from 'drizzle-orm';
import { apiTokens, jobs } from '../store/schema/index.js';
import { afterRunner, type JobState, type RunnerEnd } from '../core/jobs/states.js';
import { createApiToken, signalTokensRevoked } from './api-tokens.js';
import { withTransaction, type ServiceCtx, type ServicePorts } from './service-context.js';
import { instanceAlive } from './instances.js';

export type JobRow = typeof jobs.$inferSelect;

/** A runner a backend starts: its job and attempt, and the token it calls the control plane with (shown here only). */
export interface RunnerStart {
  job: JobRow;
  token: string;
}

/**
 * Takes the oldest pending job of the `local` backend for this instance (docs/jobs.md, "Backends"): it moves to
 * `running` under a lease of `leaseMs`, its attempt's runner gets an API token of role `inference` (it calls `/v1`
 * and the runner routes of its own job only), expiring with the job. Null when none waits. Two instances never
 * take the same job: the row is locked and skipped by the other.
 */
export async function claimLocalJob({ ctx, input }: { ctx: ServiceCtx; input: { instanceId: string; leaseMs: number } }): Promise<RunnerStart | null> {
  return await withTransaction(ctx, async (tx) => {
    const [job] = await tx.db
      .select()
      .from(jobs)
      .where(and(eq(jobs.state, 'pending'), sql`${jobs.spec}->>'backend' = 'local'`))
      .orderBy(asc(jobs.createdAt), asc(jobs.id))
      .limit(1)
      .for('update', { skipLocked: true });
    if (!job) return null;
    const { id: tokenId, token } = await createApiToken({
      ctx: tx,
      input: {
        workspaceId: job.workspaceId,
        name: `runner of ${job.id}, attempt ${job.attempt}`,
        role: 'inference',
        ...(job.expiresAt ? { expiresAt: job.expiresAt.toISOString() } : {}),
      },
    });
    const [claimed] = await tx.db
      .update(jobs)
      .set({
        state: 'running',
        runnerTokenId: tokenId,
        leaseInstanceId: input.instanceId,
        leaseExpiresAt: sql`now() + make_interval(secs => ${input.leaseMs / 1000})`,
        startedAt: sql`coalesce(${jobs.startedAt}, now())`,
      })
      .where(eq(jobs.id, job.id))
      .returning();
    return { job: claimed!, token };
  });
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
    if (job.runnerTokenId)
      await tx.db
        .update(apiTokens)
        .set({ revokedAt: sql`now()` })
        .where(and(eq(apiTokens.id, job.runnerTokenId), isNull(apiTokens.revokedAt)));
    const finished = job.totalRows !== null && job.doneRows + job.failedRows >= job.totalRows;
    const end: RunnerEnd = finished && input.end.kind === 'exited' && input.end.code === 0 ? { kind: 'done' } : input.end;
    const decision = afterRunner({ state: job.state as JobState, attempt: job.attempt, maxAttempts: job.spec.maxAttempts, end });
    const released = { runnerTokenId: null, leaseInstanceId: null, leaseExpiresAt: null };
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

/**
 * Jobs whose runner was lost with its host: `running` or `cancelling` under a lease that lapsed, or held by an
 * instance that is no longer alive. Each ends its attempt as `lost` (`endRunnerAttempt`): it starts again from its
 * checkpoint on whichever instance claims it next.
 */
export async function lostJobs(ctx: ServiceCtx): Promise<Array<{ id: string; attempt: number }>> {
  return await ctx.db
    .select({ id: jobs.id, attempt: jobs.attempt })
    .from(jobs)
    .where(
      and(
        or(eq(jobs.state, 'running'), eq(jobs.state, 'cancelling')),
        or(lt(jobs.leaseExpiresAt, sql`now()`), sql`not ${instanceAlive(jobs.leaseInstanceId)}`),
      ),
    );
}
