import { OpenAPIHono } from '@hono/zod-openapi';
import { ApiError, zodDetails } from '../../kernel/errors.js';
import type { AppEnv } from '../../dataplane/ports.js';
import { limitBody } from '../http/body-limit.js';
import { registerEnrollmentTokens } from './enrollment-tokens.js';
import { registerMachines } from './machines.js';
import { registerWorkloads } from './workloads.js';
import { registerDeployments } from './deployments.js';
import { registerRuntimeTemplates } from './runtime-templates.js';
import { registerRuntimeSecrets } from './runtime-secrets.js';
import { registerUsage } from './usage.js';
import { registerAudit } from './audit.js';
import { registerTokens } from './tokens.js';
import { registerWorkspaces } from './workspaces.js';
import { registerModels } from './models.js';
import { registerAliases } from './aliases.js';
import { registerRuns } from './runs.js';
import { registerJobs } from './jobs.js';
import { registerSwarms } from './swarms.js';
import { registerInferencePaths } from '../v1/openapi.js';

/** A version's registration carries its manifest (up to 10,000 files): the one body larger than the others. */
const MANIFEST_ROUTE = /^\/api\/v1\/models\/[^/]+\/versions$/;

/** The management surface `/api/v1`, with its OpenAPI document at `/api/v1/openapi.json`. */
export function managementApi(limits: { maxBodyBytes: number; manifestMaxBodyBytes: number }): OpenAPIHono<AppEnv> {
  const app = new OpenAPIHono<AppEnv>({
    defaultHook: (result) => {
      if (!result.success) {
        const first = result.error.issues[0];
        const where = first?.path.length ? ` at ${first.path.join('.')}` : '';
        throw new ApiError('validation_failed', `${first?.message ?? 'invalid input'}${where}`, zodDetails(result.error));
      }
    },
  });
  const limit = limitBody(limits.maxBodyBytes);
  const manifestLimit = limitBody(limits.manifestMaxBodyBytes);
  app.use('*', (c, next) => (c.req.method === 'POST' && MANIFEST_ROUTE.test(c.req.path) ? manifestLimit : limit)(c, next));
  registerEnrollmentTokens(app);
  registerMachines(app);
  registerWorkloads(app);
  registerDeployments(app);
  registerRuntimeTemplates(app);
  registerRuntimeSecrets(app);
  registerUsage(app);
  registerAudit(app);
  registerTokens(app);
  registerWorkspaces(app);
  registerModels(app);
  registerAliases(app);
  registerRuns(app);
  registerJobs(app);
  registerSwarms(app);
  registerInferencePaths(app.openAPIRegistry);
  app.openAPIRegistry.registerComponent('securitySchemes', 'bearer', { type: 'http', scheme: 'bearer', description: 'An API token (lnx_...)' });
  app.doc31('/openapi.json', {
    openapi: '3.1.0',
    info: { title: 'LunaNexa management API', version: '1' },
    servers: [{ url: '/api/v1' }],
    security: [{ bearer: [] }],
  });
  return app;
}
