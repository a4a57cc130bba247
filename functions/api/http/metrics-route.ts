import type { Context, Hono } from 'hono';
import { createMiddleware } from 'hono/factory';
import { serviceCtx, type AppEnv, type Ports } from '../../dataplane/ports.js';
import { enrolledMachineIds } from '../../services/machines.js';
import { hashSecret } from '../../services/secrets.js';
import { checkRootAdmin } from '../../services/workspaces.js';
import { bearer, requireRole } from './api-auth.js';

/**
 * GET /metrics (Prometheus text). The whole set names the machines, deployments and models of every workspace and
 * the installation's own series: it is answered to the installation's scrape token (`metricsToken`), to an admin of
 * the default workspace, and to everyone when `metricsPublic` opens it (`npm start` does, for the demo). Any other
 * API token of role viewer or above gets its own workspace's series only (those labelled `workspace="<its id>"`),
 * as its API shows it only its own workspace. Before each scrape the node-metric series of machines revoked,
 * deleted or silent for a heartbeat lifetime are removed.
 */
export function registerMetrics(app: Hono<AppEnv>, ports: Ports) {
  const refresh = async () => {
    const reported = ports.metrics.nodeMetrics.machines();
    if (reported.length > 0) {
      const live = await enrolledMachineIds({ ctx: serviceCtx(ports, 'system'), input: { machineIds: reported } });
      ports.metrics.nodeMetrics.keepOnly(live, ports.config.machineLifetimeMs);
    }
  };
  const answer = async (c: Context<AppEnv>, workspaceId: string | null) => {
    await refresh();
    c.header('Content-Type', ports.metrics.registry.contentType);
    return c.body(workspaceId === null ? await ports.metrics.registry.metrics() : await ports.metrics.workspaceSeries(workspaceId));
  };
  if (ports.config.metricsPublic) {
    app.get('/metrics', async (c) => await answer(c, null));
    return;
  }
  const scrapeTokenHash = ports.config.metricsToken === undefined ? null : hashSecret(ports.config.metricsToken);
  /** The installation's scrape token gets the whole set; anything else goes on to the API token's checks. */
  const scrapeToken = createMiddleware<AppEnv>(async (c, next) => {
    if (scrapeTokenHash !== null && (await hashSecret(bearer(c.req.header('authorization')))) === (await scrapeTokenHash)) return await answer(c, null);
    await next();
  });
  app.get('/metrics', scrapeToken, requireRole('viewer'), async (c) => {
    const actor = c.get('actor');
    const everything = await checkRootAdmin({ ctx: serviceCtx(ports, actor.tokenId), input: { actor } });
    return await answer(c, everything ? null : actor.workspaceId);
  });
}
