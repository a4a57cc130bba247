import { and, eq, isNotNull, sql } from 'drizzle-orm';
import { deployments } from '../store/schema/index.js';
import { audit, reconcileAfterWrite, withTransaction, type ServiceCtx, type ServicePorts } from './service-context.js';
import { recordDeploymentEvents } from './deployment-events.js';

/**
 * Wakes a deployment scaled to zero: clears its `asleep_since` (once, however many instances race to it), audits
 * and records it, and has its replicas placed before it returns.
 */
export async function wakeDeployment({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'afterWrite'>;
  input: { workspaceId: string; deploymentId: string; name: string };
}): Promise<void> {
  await withTransaction(ctx, async (tx) => {
    const woken = await tx.db
      .update(deployments)
      .set({ asleepSince: null, wokenAt: sql`now()` })
      .where(and(eq(deployments.id, input.deploymentId), isNotNull(deployments.asleepSince)))
      .returning({ id: deployments.id });
    if (woken.length === 0) return;
    await audit(tx, { workspaceId: input.workspaceId, action: 'deployment.wake', target: input.deploymentId, details: { name: input.name } });
    await recordDeploymentEvents(tx.db, [{ workspaceId: input.workspaceId, deploymentId: input.deploymentId, type: 'woken', message: 'woken by a request' }]);
  });
  await reconcileAfterWrite(ctx);
}
