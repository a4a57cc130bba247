import { serviceCtx, type Ports } from './ports.js';
import { wakeDeployment as wake } from '../services/deployment-wake.js';
import type { DeploymentRoute } from './routing.js';

/**
 * Wakes a deployment scaled to zero for the request that found it asleep, and refreshes routing, so that the
 * request then holds for a replica under its own deadline like any request that finds its replicas starting.
 */
export async function wakeDeployment(ports: Ports, route: DeploymentRoute): Promise<void> {
  await wake({ ctx: serviceCtx(ports, 'system'), input: { workspaceId: route.workspaceId, deploymentId: route.id, name: route.name } });
  await ports.dataPlane.routing.refreshed();
}
