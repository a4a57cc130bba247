import { z, type OpenAPIHono } from '@hono/zod-openapi';
import { RunDetail, RunQueueStanding, RunSubmission, RunView, WorkerLogs } from '../../../shared/contracts/run-view.js';
import { MAX_RUN_WORKERS } from '../../../shared/contracts/run.js';
import { pageOf } from '../../../shared/contracts/page.js';
import { isId } from '../../../shared/ids.js';
import { cancelRun, listRuns, showRun, submitRun } from '../../services/runs.js';
import { fetchWorkerLogs } from '../../services/runtime-logs.js';
import { queueStanding } from '../../services/run-queue.js';
import { serviceCtx, type AppEnv } from '../../dataplane/ports.js';
import { errorResponses } from './schemas.js';
import { guarded } from '../http/guarded.js';
import { keyset, PageQuery } from './paging.js';

const RunId = z.string().refine((id) => isId('run', id), 'a run id (run_...)');

const submit = guarded('operator', {
  method: 'post',
  path: '/runs',
  summary: 'Submit a run: queued, placed when its workspace quota and the fleet allow, its workers started (all together for a gang)',
  request: { body: { content: { 'application/json': { schema: RunSubmission } }, required: true } },
  responses: {
    201: { description: 'Queued (and placed, when it fit at once)', content: { 'application/json': { schema: RunDetail } } },
    ...errorResponses(400, 401, 403, 409, 413),
  },
});

const list = guarded('viewer', {
  method: 'get',
  path: '/runs',
  summary: "List the workspace's runs in submission order, each with its state and, while it waits, why and its queue position",
  request: { query: PageQuery },
  responses: { 200: { description: 'Runs', content: { 'application/json': { schema: pageOf(RunView) } } }, ...errorResponses(400, 401, 403) },
});

const runPages = keyset(RunId, (r: RunView) => r.id);

const show = guarded('viewer', {
  method: 'get',
  path: '/runs/{id}',
  summary: 'One run with its spec, its workers (machine, state, attempt, exit code) and its events',
  request: { params: z.object({ id: RunId }) },
  responses: { 200: { description: 'Run', content: { 'application/json': { schema: RunDetail } } }, ...errorResponses(400, 401, 403, 404) },
});

const cancel = guarded('operator', {
  method: 'post',
  path: '/runs/{id}/cancel',
  summary: 'Cancel a live run: it and its workers fail (cancelled), their machines stop them; an ended run is 409',
  request: { params: z.object({ id: RunId }) },
  responses: { 200: { description: 'Cancelled', content: { 'application/json': { schema: RunView } } }, ...errorResponses(400, 401, 403, 404, 409) },
});

const queue = guarded('viewer', {
  method: 'get',
  path: '/run-queue',
  summary:
    "The workspace's standing in the fleet's run queue: GPU-seconds in the fair-share window, its share, and its rank among the workspaces with runs waiting",
  responses: { 200: { description: 'Standing', content: { 'application/json': { schema: RunQueueStanding } } }, ...errorResponses(401, 403) },
});

const logs = guarded('operator', {
  method: 'get',
  path: '/runs/{id}/workers/{rank}/logs',
  summary: "Tail of a run worker's log, fetched from its node over the node's own stream where it is held or last ran (404 once no longer kept)",
  request: {
    params: z.object({
      id: RunId,
      // A path parameter is always present: a string schema keeps it `required` in the OpenAPI document, which a
      // coerced number does not.
      rank: z
        .string()
        .regex(/^(0|[1-9][0-9]{0,3})$/, 'a worker rank')
        .transform(Number)
        .pipe(z.number().max(MAX_RUN_WORKERS - 1)),
    }),
    query: z.object({ lines: z.coerce.number().int().min(1).max(1000).default(100) }),
  },
  responses: {
    200: { description: 'Log lines', content: { 'application/json': { schema: WorkerLogs } } },
    ...errorResponses(400, 401, 403, 404, 409),
  },
});

export function registerRuns(app: OpenAPIHono<AppEnv>) {
  app.openapi(queue, async (c) => {
    const standing = await queueStanding({ ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId), input: { workspaceId: c.get('actor').workspaceId } });
    return c.json(standing, 200);
  });
  app.openapi(submit, async (c) => {
    const ctx = serviceCtx(c.get('ports'), c.get('actor').tokenId);
    const workspaceId = c.get('actor').workspaceId;
    const { id } = await submitRun({ ctx, input: { workspaceId, ...c.req.valid('json') } });
    return c.json(await showRun({ ctx, input: { workspaceId, id } }), 201);
  });
  app.openapi(list, async (c) => {
    const { limit, cursor } = c.req.valid('query');
    const page = await listRuns({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { workspaceId: c.get('actor').workspaceId, after: runPages.after(cursor), limit },
    });
    return c.json(runPages.page(page), 200);
  });
  app.openapi(show, async (c) => {
    const detail = await showRun({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { workspaceId: c.get('actor').workspaceId, id: c.req.valid('param').id },
    });
    return c.json(detail, 200);
  });
  app.openapi(logs, async (c) => {
    const { id, rank } = c.req.valid('param');
    const tail = await fetchWorkerLogs({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { workspaceId: c.get('actor').workspaceId, runId: id, rank, lines: c.req.valid('query').lines },
    });
    return c.json(tail, 200);
  });
  app.openapi(cancel, async (c) => {
    const view = await cancelRun({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { workspaceId: c.get('actor').workspaceId, id: c.req.valid('param').id },
    });
    return c.json(view, 200);
  });
}
