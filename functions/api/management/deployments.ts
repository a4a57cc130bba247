import { z, type OpenAPIHono } from '@hono/zod-openapi';
import { DeploymentDetail, DeploymentListItem, DeploymentName, DeploymentSpec, DeploymentView } from '../../../shared/contracts/deployment.js';
import { pageOf } from '../../../shared/contracts/page.js';
import { isId } from '../../../shared/ids.js';
import { applyDeployment, deleteDeployment, describeDeployment, getDeployment, listDeployments } from '../../services/deployments.js';
import { ApiError } from '../../kernel/errors.js';
import { serviceCtx, type AppEnv } from '../../dataplane/ports.js';
import { errorResponses } from './schemas.js';
import { guarded } from '../http/guarded.js';
import { keyset, PageQuery } from './paging.js';
import { GateResult, WorkloadProfile } from '../../../shared/contracts/benchmark.js';
import { runCanaryGate } from '../../dataplane/canary-gate.js';
import { deploymentTelemetry } from '../../services/telemetry.js';
import { DeploymentTelemetry, TelemetryQuery } from '../../../shared/contracts/telemetry.js';

const list = guarded('viewer', {
  method: 'get',
  path: '/deployments',
  summary: 'List deployments, a page at a time by name, each with its status counts',
  request: { query: PageQuery },
  responses: {
    200: { description: 'Deployments', content: { 'application/json': { schema: pageOf(DeploymentListItem) } } },
    ...errorResponses(400, 401, 403),
  },
});

const deploymentPages = keyset(z.tuple([DeploymentName, z.string().refine((id) => isId('deployment', id))]), (d: DeploymentListItem): [string, string] => [
  d.name,
  d.id,
]);

const put = guarded('operator', {
  method: 'put',
  path: '/deployments/{name}',
  summary: 'Declare a deployment (create, or update and roll its replicas); the controller makes the fleet match',
  request: { params: z.object({ name: DeploymentName }), body: { content: { 'application/json': { schema: DeploymentSpec } }, required: true } },
  responses: {
    200: { description: 'Applied', content: { 'application/json': { schema: DeploymentView } } },
    ...errorResponses(400, 401, 403, 413),
  },
});

const get = guarded('viewer', {
  method: 'get',
  path: '/deployments/{name}',
  summary: 'One deployment with its status (desired, ready, starting, unplaceable with reasons, rollout progress) and recent events',
  request: { params: z.object({ name: DeploymentName }) },
  responses: { 200: { description: 'Deployment', content: { 'application/json': { schema: DeploymentDetail } } }, ...errorResponses(400, 401, 403, 404) },
});

const remove = guarded('operator', {
  method: 'delete',
  path: '/deployments/{name}',
  summary: 'Retire a deployment: its replicas drain and stop, and its model leaves /v1/models',
  request: { params: z.object({ name: DeploymentName }) },
  responses: {
    200: { description: 'Retired', content: { 'application/json': { schema: z.object({ id: z.string(), deleted: z.literal(true) }) } } },
    ...errorResponses(400, 401, 403, 404),
  },
});

const gate = guarded('operator', {
  method: 'post',
  path: '/deployments/{name}/canary/gate',
  summary:
    "Run the canary's readiness and benchmark gate: a workload profile sent to the canary replicas alone through the data plane, stored as evidence; passed moves the version to gated, failed rejects it. Canary not serving: 409, nothing recorded",
  request: { params: z.object({ name: DeploymentName }), body: { content: { 'application/json': { schema: WorkloadProfile } }, required: true } },
  responses: {
    200: { description: 'The run and the version after it', content: { 'application/json': { schema: GateResult } } },
    ...errorResponses(400, 401, 403, 404, 409, 413),
  },
});

const telemetry = guarded('viewer', {
  method: 'get',
  path: '/deployments/{name}/telemetry',
  summary: 'A deployment over time: replicas, queue, in-flight requests, KV-cache use, TTFT p95 and tokens per second',
  request: { params: z.object({ name: DeploymentName }), query: TelemetryQuery },
  responses: {
    200: { description: 'Deployment series', content: { 'application/json': { schema: DeploymentTelemetry } } },
    ...errorResponses(400, 401, 403, 404),
  },
});

export function registerDeployments(app: OpenAPIHono<AppEnv>) {
  app.openapi(telemetry, async (c) => {
    const [series] = await deploymentTelemetry({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { workspaceId: c.get('actor').workspaceId, names: [c.req.valid('param').name], query: c.req.valid('query') },
    });
    return c.json(series!, 200);
  });
  app.openapi(gate, async (c) => {
    const result = await runCanaryGate({
      ports: c.get('ports'),
      actor: c.get('actor'),
      input: { name: c.req.valid('param').name, profile: c.req.valid('json') },
    });
    return c.json(result, 200);
  });
  app.openapi(list, async (c) => {
    const ports = c.get('ports');
    const { limit, cursor } = c.req.valid('query');
    const page = await listDeployments({
      ctx: serviceCtx(ports, c.get('actor').tokenId),
      input: { workspaceId: c.get('actor').workspaceId, after: deploymentPages.after(cursor), limit },
    });
    return c.json(deploymentPages.page(page), 200);
  });
  app.openapi(get, async (c) => {
    const ports = c.get('ports');
    const detail = await describeDeployment({
      ctx: serviceCtx(ports, c.get('actor').tokenId),
      input: { workspaceId: c.get('actor').workspaceId, name: c.req.valid('param').name },
    });
    return c.json(detail, 200);
  });
  app.openapi(remove, async (c) => {
    const ports = c.get('ports');
    const ctx = serviceCtx(ports, c.get('actor').tokenId);
    const { id } = await deleteDeployment({ ctx, input: { workspaceId: c.get('actor').workspaceId, name: c.req.valid('param').name } });
    await ports.dataPlane.routing.refreshed();
    return c.json({ id, deleted: true as const }, 200);
  });
  app.openapi(put, async (c) => {
    const ports = c.get('ports');
    const ctx = serviceCtx(ports, c.get('actor').tokenId);
    const workspaceId = c.get('actor').workspaceId;
    const name = c.req.valid('param').name;
    const { id } = await applyDeployment({ ctx, input: { ...c.req.valid('json'), workspaceId, name } });
    // Answered once this instance routes the change: a request sent right after the PUT finds the model.
    await ports.dataPlane.routing.refreshed();
    const view = await getDeployment({ ctx, input: { workspaceId, id } });
    if (!view) throw new ApiError('conflict', 'the deployment changed concurrently');
    return c.json(view, 200);
  });
}
