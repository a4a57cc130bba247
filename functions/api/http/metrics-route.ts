import type { Context, Hono } from 'hono';
import { serviceCtx, type AppEnv, type Ports } from '../../dataplane/ports.js';
import { enrolledMachineIds } from '../../services/machines.js';
import { requireRole } from './api-auth.js';

/**
 * GET /metrics (Prometheus text). It names machines, deployments and models of every workspace, so it needs an
 * API token of role viewer or above unless `metricsPublic` opens it (`npm start` does, for the demo). Before each
 * scrape the node-metric series of machines revoked, deleted or silent for a heartbeat lifetime are removed.
 */
export function registerMetrics(app: Hono<AppEnv>, ports: Ports) {
  const scrape = async () => {
    const reported = ports.metrics.nodeMetrics.machines();
    if (reported.length > 0) {
      const live = await enrolledMachineIds({ ctx: serviceCtx(ports, 'system'), input: { machineIds: reported } });
      ports.metrics.nodeMetrics.keepOnly(live, ports.config.machineLifetimeMs);
    }
    return await ports.metrics.registry.metrics();
  };
  const handler = async (c: Context<AppEnv>) => {
    c.header('Content-Type', ports.metrics.registry.contentType);
    return c.body(await scrape());
  };
  if (ports.config.metricsPublic) app.get('/metrics', handler);
  else app.get('/metrics', requireRole('viewer'), handler);
}
