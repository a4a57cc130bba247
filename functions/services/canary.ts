import { and, eq, isNull, isNotNull, sql } from 'drizzle-orm';
import { deployments, modelAliases, models, modelVersions } from '../store/schema/index.js';
import type { ModelSource } from '../../shared/contracts/deployment.js';
import { ApiError } from '../kernel/errors.js';
import { audit, type ServiceCtx } from './service-context.js';
import { findVersion } from './models.js';

type DeploymentRow = typeof deployments.$inferSelect;

/** The model a deployment's source names (an alias: the model of the version it points at now); null: no source. */
async function sourceModel(ctx: ServiceCtx, workspaceId: string, source: ModelSource | null): Promise<string | null> {
  if (source === null) return null;
  if (source.kind === 'version') return source.model;
  const [row] = await ctx.db
    .select({ model: models.name })
    .from(modelAliases)
    .innerJoin(modelVersions, eq(modelVersions.id, modelAliases.versionId))
    .innerJoin(models, eq(models.id, modelVersions.modelId))
    .where(and(eq(modelAliases.workspaceId, workspaceId), eq(modelAliases.name, source.alias)));
  return row?.model ?? null;
}

/** A live deployment of the workspace by name, locked for the caller's transaction when asked; 404 when none. */
export async function liveDeployment(ctx: ServiceCtx, workspaceId: string, name: string, lock = false): Promise<DeploymentRow> {
  const query = ctx.db
    .select()
    .from(deployments)
    .where(and(eq(deployments.workspaceId, workspaceId), eq(deployments.name, name), isNull(deployments.deletedAt)));
  const [row] = lock ? await query.for('update') : await query;
  if (!row) throw new ApiError('not_found', `deployment ${name} not found`);
  return row;
}

/** A deployment's canary version row: 409 when it has none. */
export async function canaryVersion(ctx: ServiceCtx, deployment: DeploymentRow, lock = false) {
  if (!deployment.canary) throw new ApiError('conflict', `deployment ${deployment.name} has no canary`);
  const model = await sourceModel(ctx, deployment.workspaceId, deployment.source);
  if (model === null) throw new ApiError('conflict', `deployment ${deployment.name}'s source no longer resolves`);
  return { model, row: await findVersion(ctx, { workspaceId: deployment.workspaceId, model, version: deployment.canary.version, lock }) };
}

/**
 * Ends the canaries of `model`'s `version` in the workspace (its promotion or rollback decided them), in the caller's
 * transaction: each such deployment loses its canary (a new generation, audited with why), so the controller retires
 * the canary replicas. Returns the deployments changed.
 */
export async function endCanaries(
  tx: ServiceCtx,
  input: { workspaceId: string; model: string; version: string; why: 'promoted' | 'rolled_back' },
): Promise<string[]> {
  const rows = await tx.db
    .select()
    .from(deployments)
    .where(and(eq(deployments.workspaceId, input.workspaceId), isNull(deployments.deletedAt), isNotNull(deployments.canary)))
    .for('update');
  const ended: string[] = [];
  for (const row of rows) {
    if (row.canary?.version !== input.version || (await sourceModel(tx, input.workspaceId, row.source)) !== input.model) continue;
    await tx.db
      .update(deployments)
      .set({ canary: null, generation: sql`${deployments.generation} + 1`, updatedAt: sql`now()` })
      .where(eq(deployments.id, row.id));
    await audit(tx, {
      workspaceId: input.workspaceId,
      action: 'deployment.canary_end',
      target: row.id,
      details: { name: row.name, version: input.version, why: input.why },
    });
    ended.push(row.name);
  }
  return ended;
}
