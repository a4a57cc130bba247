import { and, desc, eq, gt, sql, type SQL } from 'drizzle-orm';
import { modelAliases, modelAliasMoves, models, modelVersions } from '../store/schema/index.js';
import { newId } from '../../shared/ids.js';
import type { AliasView, VersionState } from '../../shared/contracts/registry.js';
import { ApiError } from '../kernel/errors.js';
import { audit, withTransaction, type ServiceCtx } from './service-context.js';
import { cutPage, type PageRequest, type RowPage } from '../core/paging.js';
import { aliasable } from '../core/registry/lifecycle.js';
import { rollbackTarget } from '../core/registry/alias-history.js';
import { findVersion } from './models.js';

/** How far back a rollback reads an alias's history: every rollback step undoes one move, so this is plenty. */
const HISTORY_READ = 1_000;

async function readAliases(ctx: ServiceCtx, where: SQL, limit?: number): Promise<AliasView[]> {
  const query = ctx.db
    .select({
      name: modelAliases.name,
      model: models.name,
      version: modelVersions.version,
      versionId: modelAliases.versionId,
      updatedBy: modelAliases.updatedBy,
      updatedAt: modelAliases.updatedAt,
    })
    .from(modelAliases)
    .innerJoin(modelVersions, eq(modelAliases.versionId, modelVersions.id))
    .innerJoin(models, eq(modelVersions.modelId, models.id))
    .where(where)
    .orderBy(modelAliases.name);
  const rows = limit === undefined ? await query : await query.limit(limit);
  return rows.map((row) => ({ ...row, updatedAt: row.updatedAt.toISOString() }));
}

/** One page of a workspace's aliases, by name (unique in a workspace: the key). */
export async function listAliases({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string } & PageRequest<string> }): Promise<RowPage<AliasView>> {
  const where = and(eq(modelAliases.workspaceId, input.workspaceId), input.after !== undefined ? gt(modelAliases.name, input.after) : undefined)!;
  return cutPage(await readAliases(ctx, where, input.limit + 1), input.limit);
}

const aliasWhere = (workspaceId: string, name: string) => and(eq(modelAliases.workspaceId, workspaceId), eq(modelAliases.name, name))!;

/**
 * Serialises the moves of one alias, including the one that creates it (there is no row to lock yet), and
 * answers where it points now (null: nowhere yet).
 */
export async function lockAlias(tx: ServiceCtx, workspaceId: string, name: string): Promise<string | null> {
  await tx.db.execute(sql`select pg_advisory_xact_lock(hashtext(${`alias:${workspaceId}:${name}`}))`);
  const [row] = await tx.db.select({ versionId: modelAliases.versionId }).from(modelAliases).where(aliasWhere(workspaceId, name));
  return row?.versionId ?? null;
}

function refuseUnaliasable(alias: string, what: string, state: VersionState): void {
  if (!aliasable(state))
    throw new ApiError('invalid_transition', `an alias points only at an approved version: ${alias} cannot point at ${what}, which is ${state}`, { state });
}

/** Points the alias at `toVersionId`, records the move with who and why, and audits it, in the caller's transaction. */
export async function moveAlias(
  tx: ServiceCtx,
  input: { workspaceId: string; alias: string; fromVersionId: string | null; toVersionId: string; reason: string; rollback: boolean },
): Promise<AliasView> {
  await tx.db
    .insert(modelAliases)
    .values({ workspaceId: input.workspaceId, name: input.alias, versionId: input.toVersionId, updatedBy: tx.actor })
    .onConflictDoUpdate({
      target: [modelAliases.workspaceId, modelAliases.name],
      set: { versionId: input.toVersionId, updatedBy: tx.actor, updatedAt: sql`now()` },
    });
  await tx.db.insert(modelAliasMoves).values({
    id: newId('event'),
    workspaceId: input.workspaceId,
    alias: input.alias,
    fromVersionId: input.fromVersionId,
    toVersionId: input.toVersionId,
    rollback: input.rollback,
    by: tx.actor,
    reason: input.reason,
  });
  await audit(tx, {
    workspaceId: input.workspaceId,
    action: input.rollback ? 'model_alias.rollback' : 'model_alias.set',
    target: input.alias,
    details: { from: input.fromVersionId, to: input.toVersionId, reason: input.reason },
  });
  const [view] = await readAliases(tx, aliasWhere(input.workspaceId, input.alias));
  return view!;
}

/**
 * Points an alias at a version of a model, creating it if need be: the version must be approved or further on
 * (409 otherwise). Pointing it where it already points changes and records nothing.
 */
export async function setAlias({
  ctx,
  input,
}: {
  ctx: ServiceCtx;
  input: { workspaceId: string; alias: string; model: string; version: string; reason: string };
}): Promise<AliasView> {
  return await withTransaction(ctx, async (tx) => {
    const current = await lockAlias(tx, input.workspaceId, input.alias);
    const target = await findVersion(tx, { workspaceId: input.workspaceId, model: input.model, version: input.version, lock: true });
    refuseUnaliasable(input.alias, `${input.model} ${input.version}`, target.state);
    if (current === target.id) return (await readAliases(tx, aliasWhere(input.workspaceId, input.alias)))[0]!;
    return await moveAlias(tx, {
      workspaceId: input.workspaceId,
      alias: input.alias,
      fromVersionId: current,
      toVersionId: target.id,
      reason: input.reason,
      rollback: false,
    });
  });
}

/**
 * Moves an alias back one step: to where it pointed before its latest move that no rollback has undone yet
 * (functions/core/registry/alias-history.ts). No alias: 404; no earlier version, or one no longer approved: 409.
 */
export async function rollbackAlias({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string; alias: string; reason: string } }): Promise<AliasView> {
  return await withTransaction(ctx, async (tx) => {
    const current = await lockAlias(tx, input.workspaceId, input.alias);
    if (current === null) throw new ApiError('not_found', `alias ${input.alias} not found`);
    // Newest first by the database's clock: the moves of one alias are serialised, so each has a later `at`.
    const history = await tx.db
      .select({ fromVersionId: modelAliasMoves.fromVersionId, toVersionId: modelAliasMoves.toVersionId, rollback: modelAliasMoves.rollback })
      .from(modelAliasMoves)
      .where(and(eq(modelAliasMoves.workspaceId, input.workspaceId), eq(modelAliasMoves.alias, input.alias)))
      .orderBy(desc(modelAliasMoves.at), desc(modelAliasMoves.id))
      .limit(HISTORY_READ);
    const back = rollbackTarget(history);
    if (back === null) throw new ApiError('conflict', `alias ${input.alias} has no earlier version to roll back to`);
    const [target] = await tx.db
      .select({ state: modelVersions.state, version: modelVersions.version, model: models.name })
      .from(modelVersions)
      .innerJoin(models, eq(modelVersions.modelId, models.id))
      .where(and(eq(modelVersions.id, back), eq(modelVersions.workspaceId, input.workspaceId)))
      .for('update');
    refuseUnaliasable(input.alias, `${target!.model} ${target!.version}`, target!.state);
    return await moveAlias(tx, {
      workspaceId: input.workspaceId,
      alias: input.alias,
      fromVersionId: current,
      toVersionId: back,
      reason: input.reason,
      rollback: true,
    });
  });
}
