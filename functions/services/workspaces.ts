import { and, eq, gt } from 'drizzle-orm';
import { workspaces } from '../store/schema/index.js';
import { ApiError } from '../kernel/errors.js';
import { newId } from '../../shared/ids.js';
import type { WorkspaceCreated, WorkspaceRunShare, WorkspaceView } from '../../shared/contracts/tokens.js';
import { audit, withTransaction, type ServiceCtx } from './service-context.js';
import { cutPage, type PageRequest, type RowPage } from '../core/paging.js';
import { createApiToken } from './api-tokens.js';
import type { Actor } from '../core/principals.js';

/** The workspace created on first start (`ensureWorkspace`): its admins administer the others. */
export const ROOT_WORKSPACE = 'default';

const workspaceView = (row: typeof workspaces.$inferSelect): WorkspaceView => ({
  id: row.id,
  name: row.name,
  createdAt: row.createdAt.toISOString(),
  runs: { weight: row.runWeight, priorityCeiling: row.runPriorityCeiling },
});

/** Whether `actor` is an admin of the root workspace, the only one that sees and creates other workspaces. */
async function isRootAdmin(ctx: ServiceCtx, actor: Pick<Actor, 'workspaceId' | 'role'>): Promise<boolean> {
  if (actor.role !== 'admin') return false;
  const [row] = await ctx.db.select({ name: workspaces.name }).from(workspaces).where(eq(workspaces.id, actor.workspaceId));
  return row?.name === ROOT_WORKSPACE;
}

/** Whether `actor` is an admin of the root workspace: `/metrics` answers it every workspace's series. */
export async function checkRootAdmin({ ctx, input }: { ctx: ServiceCtx; input: { actor: Pick<Actor, 'workspaceId' | 'role'> } }): Promise<boolean> {
  return await isRootAdmin(ctx, input.actor);
}

/**
 * Creates a workspace and its first admin token (issued to no member; the secret is in the answer once). Only an
 * admin of the root workspace may (403 otherwise); a name already taken: 409.
 */
export async function createWorkspace({ ctx, input }: { ctx: ServiceCtx; input: { actor: Actor; name: string } }): Promise<WorkspaceCreated> {
  return await withTransaction(ctx, async (tx) => {
    if (!(await isRootAdmin(tx, input.actor))) throw new ApiError('forbidden', `only an admin of the ${ROOT_WORKSPACE} workspace creates workspaces`);
    const [row] = await tx.db
      .insert(workspaces)
      .values({ id: newId('workspace'), name: input.name })
      .onConflictDoNothing()
      .returning();
    if (!row) throw new ApiError('conflict', `a workspace named ${input.name} already exists`);
    // Recorded in the creator's chain; the token's own creation is recorded in the new workspace's.
    await audit(tx, { workspaceId: input.actor.workspaceId, action: 'workspace.create', target: row.id, details: { name: row.name } });
    const adminToken = await createApiToken({ ctx: tx, input: { workspaceId: row.id, name: 'first admin', role: 'admin', creatorRole: input.actor.role } });
    return { workspace: workspaceView(row), adminToken };
  });
}

/** One page of the workspaces `actor` may see, by id: every one for an admin of the root workspace, else its own. */
export async function listWorkspaces({ ctx, input }: { ctx: ServiceCtx; input: { actor: Actor } & PageRequest<string> }): Promise<RowPage<WorkspaceView>> {
  const all = await isRootAdmin(ctx, input.actor);
  const rows = await ctx.db
    .select()
    .from(workspaces)
    .where(and(all ? undefined : eq(workspaces.id, input.actor.workspaceId), input.after !== undefined ? gt(workspaces.id, input.after) : undefined))
    .orderBy(workspaces.id)
    .limit(input.limit + 1);
  const page = cutPage(rows, input.limit);
  return { items: page.items.map(workspaceView), more: page.more };
}

/**
 * Sets a workspace's standing in the fleet's run queue: its fair-share weight and its runs' priority ceiling. Only an
 * admin of the root workspace may (403 otherwise): it is a decision about the whole fleet. Audited in both chains.
 */
export async function setWorkspaceRunShare({
  ctx,
  input,
}: {
  ctx: ServiceCtx;
  input: { actor: Actor; workspaceId: string; share: WorkspaceRunShare };
}): Promise<WorkspaceView> {
  return await withTransaction(ctx, async (tx) => {
    if (!(await isRootAdmin(tx, input.actor))) throw new ApiError('forbidden', `only an admin of the ${ROOT_WORKSPACE} workspace sets a workspace's run share`);
    const [row] = await tx.db
      .update(workspaces)
      .set({ runWeight: input.share.weight, runPriorityCeiling: input.share.priorityCeiling })
      .where(eq(workspaces.id, input.workspaceId))
      .returning();
    if (!row) throw new ApiError('not_found', `workspace ${input.workspaceId} not found`);
    const details = { ...input.share };
    await audit(tx, { workspaceId: input.actor.workspaceId, action: 'workspace.run-share', target: row.id, details });
    if (row.id !== input.actor.workspaceId) await audit(tx, { workspaceId: row.id, action: 'workspace.run-share', target: row.id, details });
    return workspaceView(row);
  });
}
