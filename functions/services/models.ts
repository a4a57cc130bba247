import { and, desc, eq, gt, isNull } from 'drizzle-orm';
import { modelEvaluations, models, modelVersions } from '../store/schema/index.js';
import { newId } from '../../shared/ids.js';
import type { EvaluationView, Manifest, ModelDetail, ModelFormat, ModelView, VersionSummary, VersionView } from '../../shared/contracts/registry.js';
import { ApiError } from '../kernel/errors.js';
import { audit, withTransaction, type ServiceCtx } from './service-context.js';
import { cutPage, type PageRequest, type RowPage } from '../core/paging.js';

type ModelRow = typeof models.$inferSelect;
type VersionRow = typeof modelVersions.$inferSelect;

/** How many of a model's versions its detail shows, newest first. */
const DETAIL_VERSIONS = 100;

const modelView = (row: ModelRow): ModelView => ({ id: row.id, name: row.name, description: row.description, createdAt: row.createdAt.toISOString() });

const versionSummary = (row: VersionRow): VersionSummary => ({
  id: row.id,
  version: row.version,
  format: row.format,
  state: row.state,
  fileCount: row.fileCount,
  totalBytes: row.totalBytes,
  createdAt: row.createdAt.toISOString(),
  updatedAt: row.updatedAt.toISOString(),
});

/** A workspace's live model of that name, or 404 (another workspace's included). */
async function findModel(ctx: ServiceCtx, workspaceId: string, name: string): Promise<ModelRow> {
  const [row] = await ctx.db
    .select()
    .from(models)
    .where(and(eq(models.workspaceId, workspaceId), eq(models.name, name), isNull(models.deletedAt)));
  if (!row) throw new ApiError('not_found', `model ${name} not found`);
  return row;
}

/** Creates a model (a name its versions share); a name a live model of the workspace has: 409. */
export async function createModel({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string; name: string; description?: string } }): Promise<ModelView> {
  return await withTransaction(ctx, async (tx) => {
    // The partial unique index (workspace, name) of live models is the guard; no row back means it is taken.
    const [row] = await tx.db
      .insert(models)
      .values({ id: newId('model'), workspaceId: input.workspaceId, name: input.name, description: input.description ?? null })
      .onConflictDoNothing()
      .returning();
    if (!row) throw new ApiError('conflict', `a model named ${input.name} already exists`);
    await audit(tx, { workspaceId: input.workspaceId, action: 'model.create', target: row.id, details: { name: input.name } });
    return modelView(row);
  });
}

/** One page of a workspace's models, by name (unique among live models: the key). */
export async function listModels({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string } & PageRequest<string> }): Promise<RowPage<ModelView>> {
  const rows = await ctx.db
    .select()
    .from(models)
    .where(and(eq(models.workspaceId, input.workspaceId), isNull(models.deletedAt), input.after !== undefined ? gt(models.name, input.after) : undefined))
    .orderBy(models.name)
    .limit(input.limit + 1);
  const page = cutPage(rows, input.limit);
  return { items: page.items.map(modelView), more: page.more };
}

/** A model and its newest versions. */
export async function getModel({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string; name: string } }): Promise<ModelDetail> {
  const model = await findModel(ctx, input.workspaceId, input.name);
  const versions = await ctx.db.select().from(modelVersions).where(eq(modelVersions.modelId, model.id)).orderBy(desc(modelVersions.id)).limit(DETAIL_VERSIONS);
  return { ...modelView(model), versions: versions.map(versionSummary) };
}

/** A version's full view: its manifest, evidence and evaluations. */
export async function versionView(ctx: ServiceCtx, model: string, row: VersionRow): Promise<VersionView> {
  const evaluations = await ctx.db.select().from(modelEvaluations).where(eq(modelEvaluations.versionId, row.id)).orderBy(modelEvaluations.id);
  return {
    ...versionSummary(row),
    model,
    licence: row.licence,
    provenance: row.provenance,
    manifest: row.manifest,
    verification: row.verification,
    evaluations: evaluations.map(
      (e): EvaluationView => ({
        id: e.id,
        suite: e.suite,
        passed: e.passed,
        metrics: e.metrics,
        notes: e.notes,
        recordedBy: e.recordedBy,
        at: e.at.toISOString(),
      }),
    ),
    createdBy: row.createdBy,
  };
}

/**
 * A version of a workspace's model, or 404. With `lock`, its row is locked for the caller's transaction, so
 * that two moves of one version are decided one after the other, each on the state the other left.
 */
export async function findVersion(ctx: ServiceCtx, input: { workspaceId: string; model: string; version: string; lock?: boolean }): Promise<VersionRow> {
  const model = await findModel(ctx, input.workspaceId, input.model);
  const query = ctx.db
    .select()
    .from(modelVersions)
    .where(and(eq(modelVersions.modelId, model.id), eq(modelVersions.version, input.version)));
  const [row] = input.lock ? await query.for('update') : await query;
  if (!row) throw new ApiError('not_found', `version ${input.version} of model ${input.model} not found`);
  return row;
}

export async function getVersion({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string; model: string; version: string } }): Promise<VersionView> {
  return await versionView(ctx, input.model, await findVersion(ctx, input));
}

/** Registers a candidate version with its manifest; a label the model already has: 409. */
export async function registerVersion({
  ctx,
  input,
}: {
  ctx: ServiceCtx;
  input: { workspaceId: string; model: string; version: string; format: ModelFormat; manifest: Manifest };
}): Promise<VersionView> {
  return await withTransaction(ctx, async (tx) => {
    const model = await findModel(tx, input.workspaceId, input.model);
    const [row] = await tx.db
      .insert(modelVersions)
      .values({
        id: newId('modelVersion'),
        modelId: model.id,
        workspaceId: input.workspaceId,
        version: input.version,
        format: input.format,
        manifest: input.manifest,
        fileCount: input.manifest.files.length,
        totalBytes: input.manifest.files.reduce((sum, f) => sum + f.size, 0),
        createdBy: ctx.actor,
      })
      .onConflictDoNothing()
      .returning();
    if (!row) throw new ApiError('conflict', `model ${input.model} already has a version ${input.version}`);
    await audit(tx, {
      workspaceId: input.workspaceId,
      action: 'model_version.register',
      target: row.id,
      details: { model: input.model, version: input.version, format: input.format, files: row.fileCount, bytes: row.totalBytes },
    });
    return await versionView(tx, input.model, row);
  });
}
