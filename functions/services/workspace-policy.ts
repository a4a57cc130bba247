import { eq } from 'drizzle-orm';
import { workspaces } from '../store/schema/index.js';
import { WorkspacePolicy } from '../../shared/contracts/placement.js';
import type { Db } from '../store/db.js';
import { ApiError } from '../kernel/errors.js';
import { audit, reconcileAfterWrite, withTransaction, type ServiceCtx, type ServicePorts } from './service-context.js';

/** A workspace's placement policy with every default filled in (a workspace that never set one has `{}`). */
export async function loadWorkspacePolicy(db: Db, workspaceId: string): Promise<WorkspacePolicy> {
  const [row] = await db.select({ policy: workspaces.policy }).from(workspaces).where(eq(workspaces.id, workspaceId));
  if (!row) throw new ApiError('not_found', 'workspace not found');
  return WorkspacePolicy.parse(row.policy);
}

/**
 * Replaces a workspace's placement policy (quota, data classes, licence rules), audited with the policy before and
 * after. Replicas already placed stay where they are; the controller places new ones under the new policy and
 * reports those it cannot place with the rule that refuses them.
 */
export async function setWorkspacePolicy({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'afterWrite'>;
  input: { workspaceId: string; policy: WorkspacePolicy };
}): Promise<WorkspacePolicy> {
  const written = await withTransaction(ctx, async (tx) => {
    const [row] = await tx.db.select({ policy: workspaces.policy }).from(workspaces).where(eq(workspaces.id, input.workspaceId)).for('update');
    if (!row) throw new ApiError('not_found', 'workspace not found');
    await tx.db.update(workspaces).set({ policy: input.policy }).where(eq(workspaces.id, input.workspaceId));
    await audit(tx, {
      workspaceId: input.workspaceId,
      action: 'workspace.policy',
      target: input.workspaceId,
      details: { before: WorkspacePolicy.parse(row.policy), after: input.policy },
    });
    return input.policy;
  });
  await reconcileAfterWrite(ctx);
  return written;
}
