import { and, eq } from 'drizzle-orm';
import { modelAliases } from '../store/schema/index.js';
import type { VersionView } from '../../shared/contracts/registry.js';
import { ApiError } from '../kernel/errors.js';
import { reconcileAfterWrite, withTransaction, type ServiceCtx, type ServicePorts } from './service-context.js';
import { lockAlias, moveAlias, rollbackAlias } from './aliases.js';
import { endCanaries } from './canary.js';
import { findVersion } from './models.js';
import { moveVersion, type VersionRef } from './version-moves.js';

/**
 * A person promotes a gated version (docs/registry.md, "Promotion"): the version moves to `promoted`, the alias moves
 * to it (audited with the reason), and the canaries of that version end, so every deployment following the alias
 * rolls its stable replicas onto it (new ones ready before old ones drain) while the canary replicas retire. All in
 * one transaction.
 */
export async function promoteVersion({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'afterWrite'>;
  input: VersionRef & { alias: string; reason: string };
}): Promise<{ version: VersionView; endedCanaries: string[] }> {
  const written = await withTransaction(ctx, async (tx) => {
    const current = await lockAlias(tx, input.workspaceId, input.alias);
    const row = await findVersion(tx, { ...input, lock: true });
    const version = await moveVersion(tx, input, row, { type: 'promote', actor: tx.actor }, { details: { alias: input.alias, reason: input.reason } });
    if (current !== row.id)
      await moveAlias(tx, {
        workspaceId: input.workspaceId,
        alias: input.alias,
        fromVersionId: current,
        toVersionId: row.id,
        reason: input.reason,
        rollback: false,
      });
    const endedCanaries = await endCanaries(tx, { workspaceId: input.workspaceId, model: input.model, version: input.version, why: 'promoted' });
    return { version, endedCanaries };
  });
  await reconcileAfterWrite(ctx);
  return written;
}

/** A person releases a promoted version as stable after observing it. */
export async function releaseVersion({ ctx, input }: { ctx: ServiceCtx; input: VersionRef & { reason: string } }): Promise<VersionView> {
  return await withTransaction(ctx, async (tx) => {
    const row = await findVersion(tx, { ...input, lock: true });
    return await moveVersion(tx, input, row, { type: 'release', actor: tx.actor }, { details: { reason: input.reason } });
  });
}

/**
 * A person rolls a version back, from canary on: it becomes `rolled_back` (for good), every alias pointing at it moves
 * back one step (each move audited; an alias with nowhere to go back to refuses the whole rollback, 409, so no alias
 * is left on a rolled-back version), and its canaries end. Deployments following those aliases roll back.
 */
export async function rollbackVersion({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'afterWrite'>;
  input: VersionRef & { reason: string };
}): Promise<{ version: VersionView; aliases: string[]; endedCanaries: string[] }> {
  const written = await withTransaction(ctx, async (tx) => {
    const row = await findVersion(tx, { ...input, lock: true });
    const version = await moveVersion(tx, input, row, { type: 'rollback', actor: tx.actor }, { details: { reason: input.reason } });
    const pointing = await tx.db
      .select({ name: modelAliases.name })
      .from(modelAliases)
      .where(and(eq(modelAliases.workspaceId, input.workspaceId), eq(modelAliases.versionId, row.id)));
    for (const { name } of pointing) {
      await rollbackAlias({ ctx: tx, input: { workspaceId: input.workspaceId, alias: name, reason: input.reason } }).catch((error: unknown) => {
        if (error instanceof ApiError && error.code === 'conflict')
          throw new ApiError('conflict', `${error.message}: point ${name} at another approved version first, then roll ${input.model} ${input.version} back`);
        throw error;
      });
    }
    const endedCanaries = await endCanaries(tx, { workspaceId: input.workspaceId, model: input.model, version: input.version, why: 'rolled_back' });
    return { version, aliases: pointing.map((a) => a.name), endedCanaries };
  });
  await reconcileAfterWrite(ctx);
  return written;
}
