import { and, eq, gt, inArray, sql } from 'drizzle-orm';
import { jobs, swarms } from '../store/schema/index.js';
import { newId } from '../../shared/ids.js';
import { canonicalize } from '../../shared/canonical.js';
import type { SwarmConfig, SwarmDown, SwarmJobs, SwarmUp, SwarmView } from '../../shared/contracts/swarm.js';
import { ApiError } from '../kernel/errors.js';
import { cutPage, type PageRequest, type RowPage } from '../core/paging.js';
import { swarmStatus } from '../core/swarm-status.js';
import { applyDeployment, deleteDeployment, deploymentStatusesByName } from './deployments.js';
import { cancelJobRow } from './jobs.js';
import { findSwarm, swarmModel, type SwarmRow } from './swarm-records.js';
import { audit, reconcileAfterWrite, withTransaction, type ServiceCtx, type ServicePorts } from './service-context.js';

/** The jobs a swarm's `down` cancels: those not already ending (a cancelling or finalizing job ends by itself). */
const UNFINISHED = ['pending', 'running'];

/** Serialises the ups and downs of a workspace's swarms: two ups of one name, or of two names on one deployment. */
async function lockSwarms(ctx: ServiceCtx, workspaceId: string): Promise<void> {
  await ctx.db.execute(sql`select pg_advisory_xact_lock(hashtext(${`swarms:${workspaceId}`}))`);
}

/** A config as stored and compared: JSON (no undefined members), its keys in canonical order. */
const canonical = (config: SwarmConfig) => canonicalize(JSON.parse(JSON.stringify(config)));

/**
 * `PUT /api/v1/swarms/{name}` (up): creates the swarm, or reconciles it with `config`. Its deployment (named after the
 * swarm unless the config names it) is applied through the deployments' own verb (`applyDeployment`: its checks,
 * its generation, its audit entry) in the same transaction as the swarm's record, so that both land or neither does.
 * A deployment of that name not yet a swarm's becomes this one's; one that is another swarm's, or another name for
 * an existing swarm's deployment, is 409. Audited as `swarm.up` when it created or changed anything; the same config
 * again, with the deployment as it declares it, is a no-op.
 */
export async function upSwarm({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'afterWrite'>;
  input: { workspaceId: string; name: string; config: SwarmUp };
}): Promise<{ id: string; created: boolean; changed: boolean }> {
  if (input.config.name !== undefined && input.config.name !== input.name) {
    throw new ApiError('validation_failed', `the body is swarm ${input.config.name}'s, the path swarm ${input.name}'s: they must be the same`);
  }
  const config: SwarmConfig = { name: input.name, deployment: input.config.deployment, jobs: input.config.jobs };
  const { name: deploymentName = input.name, ...spec } = config.deployment;
  const written = await withTransaction(ctx, async (tx) => {
    await lockSwarms(tx, input.workspaceId);
    const [existing] = await tx.db
      .select()
      .from(swarms)
      .where(and(eq(swarms.workspaceId, input.workspaceId), eq(swarms.name, input.name)))
      .for('update');
    if (existing && existing.deploymentName !== deploymentName) {
      throw new ApiError(
        'conflict',
        `swarm ${input.name} serves through deployment ${existing.deploymentName}, not ${deploymentName}: bring it down before renaming its deployment`,
      );
    }
    if (!existing) {
      const [owner] = await tx.db
        .select({ name: swarms.name })
        .from(swarms)
        .where(and(eq(swarms.workspaceId, input.workspaceId), eq(swarms.deploymentName, deploymentName)));
      if (owner) throw new ApiError('conflict', `deployment ${deploymentName} is swarm ${owner.name}'s`);
    }
    const deployment = await applyDeployment({ ctx: tx, input: { ...spec, workspaceId: input.workspaceId, name: deploymentName } });
    const configChanged = existing !== undefined && canonical(existing.config) !== canonical(config);
    let id: string;
    if (existing) {
      id = existing.id;
      if (configChanged || deployment.changed) {
        await tx.db.update(swarms).set({ config, updatedAt: sql`now()` }).where(eq(swarms.id, id));
      }
    } else {
      id = newId('swarm');
      await tx.db.insert(swarms).values({ id, workspaceId: input.workspaceId, name: input.name, deploymentName, config });
    }
    const changed = !existing || configChanged || deployment.changed;
    if (changed) {
      await audit(tx, {
        workspaceId: input.workspaceId,
        action: 'swarm.up',
        target: id,
        details: { name: input.name, created: !existing, deployment: deploymentName, deploymentGeneration: deployment.generation },
      });
    }
    return { id, created: !existing, changed };
  });
  await reconcileAfterWrite(ctx);
  return written;
}

/**
 * `DELETE /api/v1/swarms/{name}` (down), in one transaction: cancels its unfinished jobs (`cancelJobRow`, each audited
 * `job.cancel`: a running one stops and keeps the rows it finished), retires its deployment (`deleteDeployment`;
 * one already deleted outside the swarm is left so), removes its record, audited as `swarm.down`. A swarm that does
 * not exist (never, or down already) is 404, as a deployment's delete is.
 */
export async function downSwarm({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'afterWrite'>;
  input: { workspaceId: string; name: string };
}): Promise<SwarmDown> {
  const done = await withTransaction(ctx, async (tx) => {
    await lockSwarms(tx, input.workspaceId);
    const swarm = await findSwarm(tx, { ...input, lock: 'update' });
    const unfinished = await tx.db
      .select({ id: jobs.id })
      .from(jobs)
      .where(and(eq(jobs.workspaceId, input.workspaceId), eq(jobs.swarmId, swarm.id), inArray(jobs.state, UNFINISHED)))
      .orderBy(jobs.id);
    for (const job of unfinished) await cancelJobRow(tx, { workspaceId: input.workspaceId, jobId: job.id });
    let deploymentDeleted = true;
    try {
      await deleteDeployment({ ctx: tx, input: { workspaceId: input.workspaceId, name: swarm.deploymentName } });
    } catch (error) {
      if (!(error instanceof ApiError && error.code === 'not_found')) throw error;
      deploymentDeleted = false;
    }
    await tx.db.delete(swarms).where(eq(swarms.id, swarm.id));
    const cancelledJobs = unfinished.map((j) => j.id);
    await audit(tx, {
      workspaceId: input.workspaceId,
      action: 'swarm.down',
      target: swarm.id,
      details: { name: swarm.name, deployment: swarm.deploymentName, deploymentDeleted, cancelledJobs: cancelledJobs.length },
    });
    return { name: swarm.name, deleted: true as const, cancelledJobs, deploymentDeleted };
  });
  await reconcileAfterWrite(ctx);
  return done;
}

/** A workspace's swarm with its derived status and its jobs' counts; 404 when it has none of that name. */
export async function getSwarm({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'config'>;
  input: { workspaceId: string; name: string };
}): Promise<SwarmView> {
  const [view] = await swarmViews(ctx, input.workspaceId, [await findSwarm(ctx, input)]);
  return view!;
}

/** One page of a workspace's swarms by name, after `after` (a name), each as `getSwarm` shows it. */
export async function listSwarms({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'config'>;
  input: { workspaceId: string } & PageRequest<string>;
}): Promise<RowPage<SwarmView>> {
  const rows = await ctx.db
    .select()
    .from(swarms)
    .where(and(eq(swarms.workspaceId, input.workspaceId), input.after === undefined ? undefined : gt(swarms.name, input.after)))
    .orderBy(swarms.name)
    .limit(input.limit + 1);
  const page = cutPage(rows, input.limit);
  return { items: await swarmViews(ctx, input.workspaceId, page.items), more: page.more };
}

/**
 * The swarms' views: one read of the fleet for all their deployments' statuses, one count of their jobs by state. The
 * endpoint is `<LUNANEXA_PUBLIC_URL>/v1` where the plane knows its public URL; else the path `/v1`, which a client
 * resolves against the URL it reached the plane at (the SDK and the CLI do).
 */
async function swarmViews(ctx: ServiceCtx & Pick<ServicePorts, 'config'>, workspaceId: string, rows: readonly SwarmRow[]): Promise<SwarmView[]> {
  if (rows.length === 0) return [];
  const deployed = await deploymentStatusesByName({ ctx, input: { workspaceId, names: rows.map((r) => r.deploymentName) } });
  const counted = await ctx.db
    .select({ swarmId: jobs.swarmId, state: jobs.state, count: sql<number>`count(*)::int` })
    .from(jobs)
    .where(
      and(
        eq(jobs.workspaceId, workspaceId),
        inArray(
          jobs.swarmId,
          rows.map((r) => r.id),
        ),
      ),
    )
    .groupBy(jobs.swarmId, jobs.state);
  const publicUrl = ctx.config.publicUrl;
  const endpoint = publicUrl === undefined ? '/v1' : `${publicUrl.replace(/\/+$/, '')}/v1`;
  return rows.map((row) => {
    const deployment = deployed.get(row.deploymentName);
    const status = deployment?.status;
    const jobCounts: SwarmJobs = { total: 0, pending: 0, running: 0, finalizing: 0, completed: 0, failed: 0, cancelling: 0, cancelled: 0, expired: 0 };
    for (const c of counted) {
      if (c.swarmId !== row.id) continue;
      jobCounts[c.state as Exclude<keyof SwarmJobs, 'total'>] += Number(c.count);
      jobCounts.total += Number(c.count);
    }
    return {
      id: row.id,
      name: row.name,
      config: row.config,
      deployment: row.deploymentName,
      model: swarmModel(row),
      endpoint,
      status: swarmStatus(status),
      replicas: { desired: status?.desired ?? 0, ready: status?.ready ?? 0, starting: status?.starting ?? 0, failed: status?.failed ?? 0 },
      reasons: status?.degradedReasons ?? [],
      jobs: jobCounts,
      createdAt: row.createdAt.toISOString(),
      updatedAt: row.updatedAt.toISOString(),
    };
  });
}
