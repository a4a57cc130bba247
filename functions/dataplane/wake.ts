import { and, eq, isNotNull, sql } from 'drizzle-orm';
import { deployments } from '../store/schema/index.js';
import { serviceCtx, type Ports } from './ports.js';
import { reconcileOnce } from '../controller/driver.js';
import { audit, withTransaction } from '../services/service-context.js';
import { recordDeploymentEvents } from '../services/deployment-events.js';
import type { DeploymentRoute } from './routing.js';

/**
 * Wakes a deployment scaled to zero for the request that found it asleep: clears its `asleep_since` (once, however
 * many instances race to it), places its replicas, and refreshes routing, so that the request then holds for a
 * replica under its own deadline like any request that finds its replicas starting.
 */
export async function wakeDeployment(ports: Ports, route: DeploymentRoute): Promise<void> {
  const ctx = serviceCtx(ports, 'system');
  await withTransaction(ctx, async (tx) => {
    const woken = await tx.db
      .update(deployments)
      .set({ asleepSince: null, wokenAt: sql`now()` })
      .where(and(eq(deployments.id, route.id), isNotNull(deployments.asleepSince)))
      .returning({ id: deployments.id });
    if (woken.length === 0) return;
    await audit(tx, { workspaceId: route.workspaceId, action: 'deployment.wake', target: route.id, details: { name: route.name } });
    await recordDeploymentEvents(tx.db, [{ workspaceId: route.workspaceId, deploymentId: route.id, type: 'woken', message: 'woken by a request' }]);
  });
  await reconcileOnce({ ctx });
  await ports.relay.routing.refreshed();
}
