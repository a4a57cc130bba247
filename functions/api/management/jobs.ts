import { z, type OpenAPIHono } from '@hono/zod-openapi';
import { CommandSubmission, JobSubmission, JobView } from '../../../shared/batch/job.js';
import { pageOf } from '../../../shared/contracts/page.js';
import { isId } from '../../../shared/ids.js';
import { cancelJob, getJob, listJobs, submitCommandJob, submitJob } from '../../services/jobs.js';
import { jobLogs } from '../../services/job-logs.js';
import { WorkerLogs } from '../../../shared/contracts/run-view.js';
import { serviceCtx, type AppEnv } from '../../dataplane/ports.js';
import { errorResponses } from './schemas.js';
import { guarded } from '../http/guarded.js';
import { keyset, PageQuery } from './paging.js';

const JobId = z.string().refine((id) => isId('job', id), 'a job id (job_...)');

const submit = guarded('operator', {
  method: 'post',
  path: '/jobs',
  summary: 'Submit a built-in job: chat, completion or embedding rows of a JSONL or Parquet file, sent to a model, checkpointed as they finish',
  request: { body: { content: { 'application/json': { schema: JobSubmission } }, required: true } },
  responses: { 201: { description: 'Queued', content: { 'application/json': { schema: JobView } } }, ...errorResponses(400, 401, 403, 404, 413) },
});

const submitCommand = guarded('operator', {
  method: 'post',
  path: '/jobs/commands',
  summary:
    "Submit a command job: a registered job template's process, run on one of the fleet's nodes (agent backend) where its local policy allows it, given ENDPOINT, MODEL and a token",
  request: { body: { content: { 'application/json': { schema: CommandSubmission } }, required: true } },
  responses: { 201: { description: 'Queued', content: { 'application/json': { schema: JobView } } }, ...errorResponses(400, 401, 403, 404, 413) },
});

const list = guarded('viewer', {
  method: 'get',
  path: '/jobs',
  summary: "List the workspace's jobs, batches included, newest first, with their progress",
  request: { query: PageQuery },
  responses: { 200: { description: 'Jobs', content: { 'application/json': { schema: pageOf(JobView) } } }, ...errorResponses(400, 401, 403) },
});

const jobPages = keyset(JobId, (j: JobView) => j.id);

const show = guarded('viewer', {
  method: 'get',
  path: '/jobs/{id}',
  summary: 'One job: its spec, state, rows done and failed, rate, ETA and output files',
  request: { params: z.object({ id: JobId }) },
  responses: { 200: { description: 'Job', content: { 'application/json': { schema: JobView } } }, ...errorResponses(400, 401, 403, 404) },
});

const cancel = guarded('operator', {
  method: 'post',
  path: '/jobs/{id}/cancel',
  summary: 'Cancel a job: it stops, and its output keeps the rows it finished; one already ending is 409',
  request: { params: z.object({ id: JobId }) },
  responses: { 200: { description: 'Cancelling', content: { 'application/json': { schema: JobView } } }, ...errorResponses(400, 401, 403, 404, 409) },
});

const logs = guarded('operator', {
  method: 'get',
  path: '/jobs/{id}/logs',
  summary:
    "Tail of a job's runner's log: on the agent backend, its latest attempt's worker log, fetched from its node over the node's own stream; 409 for a backend whose runners log elsewhere",
  request: {
    params: z.object({ id: JobId }),
    query: z.object({ lines: z.coerce.number().int().min(1).max(1000).default(100) }),
  },
  responses: {
    200: { description: 'Log lines', content: { 'application/json': { schema: WorkerLogs } } },
    ...errorResponses(400, 401, 403, 404, 409),
  },
});

export function registerJobs(app: OpenAPIHono<AppEnv>) {
  app.openapi(submitCommand, async (c) => {
    const view = await submitCommandJob({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { workspaceId: c.get('actor').workspaceId, submission: c.req.valid('json') },
    });
    return c.json(view, 201);
  });
  app.openapi(logs, async (c) => {
    const tail = await jobLogs({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { workspaceId: c.get('actor').workspaceId, jobId: c.req.valid('param').id, lines: c.req.valid('query').lines },
    });
    return c.json(tail, 200);
  });
  app.openapi(submit, async (c) => {
    const view = await submitJob({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { workspaceId: c.get('actor').workspaceId, submission: c.req.valid('json') },
    });
    return c.json(view, 201);
  });
  app.openapi(list, async (c) => {
    const { limit, cursor } = c.req.valid('query');
    const page = await listJobs({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { workspaceId: c.get('actor').workspaceId, after: jobPages.after(cursor), limit },
    });
    return c.json(jobPages.page(page), 200);
  });
  app.openapi(show, async (c) => {
    const view = await getJob({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { workspaceId: c.get('actor').workspaceId, jobId: c.req.valid('param').id },
    });
    return c.json(view, 200);
  });
  app.openapi(cancel, async (c) => {
    const view = await cancelJob({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { workspaceId: c.get('actor').workspaceId, jobId: c.req.valid('param').id },
    });
    return c.json(view, 200);
  });
}
