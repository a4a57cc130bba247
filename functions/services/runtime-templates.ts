import { and, eq, gt, sql } from 'drizzle-orm';
import { runtimeTemplates } from '../store/schema/index.js';
import { canonicalize } from '../../shared/canonical.js';
import type { RuntimeTemplateSpec, RuntimeTemplateView } from '../../shared/contracts/runtime-template.js';
import { ApiError } from '../kernel/errors.js';
import { audit, reconcileAfterWrite, withTransaction, type ServiceCtx, type ServicePorts } from './service-context.js';
import { cutPage, type PageRequest, type RowPage } from '../core/paging.js';
import { checkTemplate } from '../core/registry/template-check.js';
import { renderArgs, renderEnv } from '../core/registry/render.js';
import { liveTemplateDeployments } from './runtime-registry.js';

type TemplateRow = typeof runtimeTemplates.$inferSelect;

function templateView(row: TemplateRow): RuntimeTemplateView {
  return { name: row.name, ...row.spec, createdAt: row.createdAt.toISOString(), updatedAt: row.updatedAt.toISOString() };
}

/** One page of the runtime templates of a workspace, by name (unique in a workspace: the key). */
export async function listRuntimeTemplates({
  ctx,
  input,
}: {
  ctx: ServiceCtx;
  input: { workspaceId: string } & PageRequest<string>;
}): Promise<RowPage<RuntimeTemplateView>> {
  const rows = await ctx.db
    .select()
    .from(runtimeTemplates)
    .where(and(eq(runtimeTemplates.workspaceId, input.workspaceId), input.after !== undefined ? gt(runtimeTemplates.name, input.after) : undefined))
    .orderBy(runtimeTemplates.name)
    .limit(input.limit + 1);
  const page = cutPage(rows, input.limit);
  return { items: page.items.map(templateView), more: page.more };
}

/** One runtime template; 404 when there is none. */
export async function getRuntimeTemplate({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string; name: string } }): Promise<RuntimeTemplateView> {
  const [row] = await ctx.db
    .select()
    .from(runtimeTemplates)
    .where(and(eq(runtimeTemplates.workspaceId, input.workspaceId), eq(runtimeTemplates.name, input.name)));
  if (!row) throw new ApiError('not_found', `runtime template ${input.name} not found`);
  return templateView(row);
}

/**
 * Registers a template, or replaces it (admins only, at the route). Refused with 400 when the template is
 * inconsistent (`checkTemplate`), and with 409 when a live deployment's params or env would no longer render
 * with it: that deployment must change first. Re-registering the same spec changes nothing; a changed one rolls
 * the deployments that use it once the controller resolves them again (their template digest changes).
 */
export async function putRuntimeTemplate({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'afterWrite'>;
  input: { workspaceId: string; name: string; spec: RuntimeTemplateSpec };
}): Promise<{ view: RuntimeTemplateView; changed: boolean }> {
  const issues = checkTemplate(input.spec);
  if (issues.length) throw new ApiError('validation_failed', `${issues[0]!.message} at ${issues[0]!.path}`, issues);
  const written = await withTransaction(ctx, async (tx) => {
    const where = and(eq(runtimeTemplates.workspaceId, input.workspaceId), eq(runtimeTemplates.name, input.name));
    const [existing] = await tx.db.select().from(runtimeTemplates).where(where).for('update');
    if (existing && canonicalize(existing.spec) === canonicalize(input.spec)) return { view: templateView(existing), changed: false };
    const broken = (await liveTemplateDeployments(tx.db, input.workspaceId))
      .filter((d) => d.runtime.template === input.name)
      .flatMap((d) => {
        const args = renderArgs(input.spec, d.runtime.params);
        const env = renderEnv(input.spec, d.runtime.env);
        const problems = [...(args.ok ? [] : args.issues), ...(env.ok ? [] : env.issues)];
        return problems.length ? [{ deployment: d.name, issues: problems }] : [];
      });
    if (broken.length) {
      const first = broken[0]!;
      throw new ApiError(
        'conflict',
        `deployment ${first.deployment} would no longer render with this template: ${first.issues[0]!.message}; change it first`,
        broken,
      );
    }
    const [row] = existing
      ? await tx.db.update(runtimeTemplates).set({ spec: input.spec, updatedAt: sql`now()` }).where(where).returning()
      : await tx.db.insert(runtimeTemplates).values({ workspaceId: input.workspaceId, name: input.name, spec: input.spec }).returning();
    await audit(tx, {
      workspaceId: input.workspaceId,
      action: existing ? 'runtime_template.update' : 'runtime_template.create',
      target: input.name,
      details: { executable: input.spec.executable, executableSha256: input.spec.executableSha256 },
    });
    return { view: templateView(row!), changed: true };
  });
  if (written.changed) await reconcileAfterWrite(ctx);
  return written;
}

/** Removes a template; 409 while a live deployment uses it, 404 when there is none. */
export async function deleteRuntimeTemplate({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string; name: string } }): Promise<void> {
  await withTransaction(ctx, async (tx) => {
    const where = and(eq(runtimeTemplates.workspaceId, input.workspaceId), eq(runtimeTemplates.name, input.name));
    const [existing] = await tx.db.select({ name: runtimeTemplates.name }).from(runtimeTemplates).where(where).for('update');
    if (!existing) throw new ApiError('not_found', `runtime template ${input.name} not found`);
    const users = (await liveTemplateDeployments(tx.db, input.workspaceId)).filter((d) => d.runtime.template === input.name).map((d) => d.name);
    if (users.length) throw new ApiError('conflict', `runtime template ${input.name} is used by deployment ${users.join(', ')}`, { deployments: users });
    await tx.db.delete(runtimeTemplates).where(where);
    await audit(tx, { workspaceId: input.workspaceId, action: 'runtime_template.delete', target: input.name });
  });
}
