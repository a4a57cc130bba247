import { Hono, type Context } from 'hono';
import { BatchCreateRequest, BatchListQuery } from '../../../shared/contracts/openai-batch.js';
import { serviceCtx, type AppEnv } from '../../dataplane/ports.js';
import { cancelBatch, createBatch, getBatch, listBatches } from '../../services/batches.js';
import { parseBody } from './body.js';
import { parseOpenAI } from './errors.js';

/** A batch's creation body is a few ids and metadata: 64 KiB is generous. */
const CREATE_MAX_BYTES = 64 * 1024;

/**
 * OpenAI's Batch API (docs/jobs.md, "The Batch API"): a batch is a job of the workspace over a `batch` file of the
 * Files API, run by its runner against the batch's endpoint, its output and error files written back to the Files
 * API. Mounted under `/v1`, behind its token check: every role may use it, within its own workspace.
 */
export function batchesApi(): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  const ctxOf = (c: Context<AppEnv>) => serviceCtx(c.get('ports'), c.get('actor').tokenId);

  app.post('/', async (c) => {
    const request = await parseBody(c, BatchCreateRequest, CREATE_MAX_BYTES);
    return c.json(await createBatch({ ctx: ctxOf(c), input: { workspaceId: c.get('actor').workspaceId, request } }));
  });

  app.get('/', async (c) => {
    const query = parseOpenAI(BatchListQuery, c.req.query());
    return c.json(await listBatches({ ctx: ctxOf(c), input: { workspaceId: c.get('actor').workspaceId, ...query } }));
  });

  app.get('/:batch_id', async (c) =>
    c.json(await getBatch({ ctx: ctxOf(c), input: { workspaceId: c.get('actor').workspaceId, jobId: c.req.param('batch_id') } })),
  );

  app.post('/:batch_id/cancel', async (c) =>
    c.json(await cancelBatch({ ctx: ctxOf(c), input: { workspaceId: c.get('actor').workspaceId, jobId: c.req.param('batch_id') } })),
  );

  return app;
}
