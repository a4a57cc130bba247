import { z, type OpenAPIHono } from '@hono/zod-openapi';
import type { Context } from 'hono';
import { ApiError } from '../../kernel/errors.js';
import { cancelWorkload, getWorkload, sweepIfOrphaned } from '../../services/workloads.js';
import { serviceCtx, type AppEnv } from '../../dataplane/ports.js';
import { errorResponses } from './schemas.js';
import { guarded } from '../http/guarded.js';

const WorkloadView = z.object({
  id: z.string(),
  state: z.string(),
  deploymentId: z.string(),
  machineId: z.string().nullable(),
  attempts: z.number().int(),
  statusCode: z.number().int().nullable(),
  errorCode: z.string().nullable(),
  createdAt: z.string(),
  finishedAt: z.string().nullable(),
  /** The registry version that answered and from which replica set (`stable` or `canary`); null when none did. */
  versionId: z.string().nullable(),
  track: z.string().nullable(),
  dataClass: z.string().nullable(),
});

const get = guarded('viewer', {
  method: 'get',
  path: '/workloads/{id}',
  summary: 'One inference workload (no payload is ever stored)',
  request: { params: z.object({ id: z.string().min(1).max(64) }) },
  responses: { 200: { description: 'Workload', content: { 'application/json': { schema: WorkloadView } } }, ...errorResponses(401, 403, 404) },
});

const cancel = guarded('operator', {
  method: 'post',
  path: '/workloads/{id}/cancel',
  summary: 'Cancel a running workload: the runtime call on the node is aborted',
  request: { params: z.object({ id: z.string().min(1).max(64) }) },
  responses: {
    202: { description: 'Cancellation sent', content: { 'application/json': { schema: z.object({ id: z.string(), cancelled: z.literal(true) }) } } },
    ...errorResponses(401, 403, 404, 409),
  },
});

/** The caller's workload, or 404; what this instance has written behind is read back as written. */
async function loadWorkload(c: Context<AppEnv>, id: string) {
  const ports = c.get('ports');
  await ports.dataPlane.workloads.flush();
  const row = await getWorkload({ ctx: serviceCtx(ports, c.get('actor').tokenId), input: { workspaceId: c.get('actor').workspaceId, id } });
  if (!row) throw new ApiError('not_found', 'workload not found');
  return row;
}

export function registerWorkloads(app: OpenAPIHono<AppEnv>) {
  app.openapi(get, async (c) => {
    const row = await loadWorkload(c, c.req.valid('param').id);
    return c.json(
      {
        id: row.id,
        state: row.state,
        deploymentId: row.deploymentId,
        machineId: row.machineId,
        attempts: row.attempts,
        statusCode: row.statusCode,
        errorCode: row.errorCode,
        createdAt: row.createdAt.toISOString(),
        finishedAt: row.finishedAt?.toISOString() ?? null,
        versionId: row.versionId,
        track: row.machineId === null ? null : row.track,
        dataClass: row.dataClass,
      },
      200,
    );
  });
  app.openapi(cancel, async (c) => {
    const ports = c.get('ports');
    const { id } = c.req.valid('param');
    const row = await loadWorkload(c, id);
    if (row.state !== 'running') throw new ApiError('conflict', `workload is already ${row.state}`);
    const ctx = serviceCtx(ports, c.get('actor').tokenId);
    const cancel = { workspaceId: row.workspaceId, id, deploymentId: row.deploymentId, tokenId: row.tokenId };
    const live = ports.dataPlane.live.get(id);
    if (live) {
      // Audited first: a cancel that cuts another client's answer is never left unrecorded.
      await cancelWorkload({ ctx, input: { ...cancel, heldHere: true } });
      live.cancel('cancelled by API');
    } else {
      // Held by an instance that died: nothing can reach it (its node aborted the call when the stream broke).
      if (await sweepIfOrphaned({ ctx, input: { id } })) {
        throw new ApiError('workload_unreachable', 'the instance that ran this workload is gone; it is now recorded as failed (holder_lost)');
      }
      await cancelWorkload({ ctx, input: { ...cancel, heldHere: false } });
      await ports.bus.publish(`workload:${id}`, { type: 'cancel-workload' });
    }
    return c.json({ id, cancelled: true as const }, 202);
  });
}
