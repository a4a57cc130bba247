import { z, type OpenAPIHono } from '@hono/zod-openapi';
import { pageOf } from '../../../shared/contracts/page.js';
import { SwarmDown, SwarmName, SwarmUp, SwarmView } from '../../../shared/contracts/swarm.js';
import { downSwarm, getSwarm, listSwarms, upSwarm } from '../../services/swarms.js';
import { serviceCtx, type AppEnv } from '../../dataplane/ports.js';
import { errorResponses } from './schemas.js';
import { guarded } from '../http/guarded.js';
import { keyset, PageQuery } from './paging.js';

const up = guarded('operator', {
  method: 'put',
  path: '/swarms/{name}',
  summary:
    'Bring a swarm up: create it, or reconcile it and its deployment with this config (the deployment is applied as PUT /deployments/{name} applies one, in the same transaction as the record)',
  request: { params: z.object({ name: SwarmName }), body: { content: { 'application/json': { schema: SwarmUp } }, required: true } },
  responses: {
    200: { description: 'Up', content: { 'application/json': { schema: SwarmView } } },
    ...errorResponses(400, 401, 403, 409, 413),
  },
});

const list = guarded('viewer', {
  method: 'get',
  path: '/swarms',
  summary: "List the workspace's swarms, a page at a time by name, each with its status and its jobs' counts",
  request: { query: PageQuery },
  responses: { 200: { description: 'Swarms', content: { 'application/json': { schema: pageOf(SwarmView) } } }, ...errorResponses(400, 401, 403) },
});

const swarmPages = keyset(SwarmName, (s: SwarmView) => s.name);

const get = guarded('viewer', {
  method: 'get',
  path: '/swarms/{name}',
  summary: "One swarm: its config, its deployment's status (replicas ready of desired), its endpoint and model, its jobs by state",
  request: { params: z.object({ name: SwarmName }) },
  responses: { 200: { description: 'Swarm', content: { 'application/json': { schema: SwarmView } } }, ...errorResponses(400, 401, 403, 404) },
});

const down = guarded('operator', {
  method: 'delete',
  path: '/swarms/{name}',
  summary: 'Bring a swarm down: cancel its unfinished jobs, retire its deployment, remove its record',
  request: { params: z.object({ name: SwarmName }) },
  responses: { 200: { description: 'Down', content: { 'application/json': { schema: SwarmDown } } }, ...errorResponses(400, 401, 403, 404) },
});

export function registerSwarms(app: OpenAPIHono<AppEnv>) {
  app.openapi(up, async (c) => {
    const ports = c.get('ports');
    const ctx = serviceCtx(ports, c.get('actor').tokenId);
    const workspaceId = c.get('actor').workspaceId;
    const name = c.req.valid('param').name;
    await upSwarm({ ctx, input: { workspaceId, name, config: c.req.valid('json') } });
    // Answered once this instance routes the change, as a deployment's PUT is: a request sent right after finds the model.
    await ports.dataPlane.routing.refreshed();
    return c.json(await getSwarm({ ctx, input: { workspaceId, name } }), 200);
  });
  app.openapi(list, async (c) => {
    const { limit, cursor } = c.req.valid('query');
    const page = await listSwarms({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { workspaceId: c.get('actor').workspaceId, after: swarmPages.after(cursor), limit },
    });
    return c.json(swarmPages.page(page), 200);
  });
  app.openapi(get, async (c) => {
    const view = await getSwarm({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { workspaceId: c.get('actor').workspaceId, name: c.req.valid('param').name },
    });
    return c.json(view, 200);
  });
  app.openapi(down, async (c) => {
    const ports = c.get('ports');
    const result = await downSwarm({
      ctx: serviceCtx(ports, c.get('actor').tokenId),
      input: { workspaceId: c.get('actor').workspaceId, name: c.req.valid('param').name },
    });
    await ports.dataPlane.routing.refreshed();
    return c.json(result, 200);
  });
}
