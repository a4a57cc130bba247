import { z, type OpenAPIHono } from '@hono/zod-openapi';
import { RuntimeSecretPut, RuntimeSecretView, TemplateName } from '../../../shared/contracts/runtime-template.js';
import { pageOf } from '../../../shared/contracts/page.js';
import { deleteRuntimeSecret, listRuntimeSecrets, putRuntimeSecret } from '../../services/runtime-secrets.js';
import { serviceCtx, type AppEnv } from '../../dataplane/ports.js';
import { errorResponses } from './schemas.js';
import { guarded } from '../http/guarded.js';
import { keyset, PageQuery } from './paging.js';

const list = guarded('viewer', {
  method: 'get',
  path: '/runtime-secrets',
  summary: 'List runtime secrets, a page at a time by name: names, what they may feed and times, never a value',
  request: { query: PageQuery },
  responses: {
    200: { description: 'Runtime secrets', content: { 'application/json': { schema: pageOf(RuntimeSecretView) } } },
    ...errorResponses(400, 401, 403),
  },
});

const secretPages = keyset(TemplateName, (s: RuntimeSecretView) => s.name);

const put = guarded('admin', {
  method: 'put',
  path: '/runtime-secrets/{name}',
  summary:
    'Write a runtime secret (admin, write-only) and the template/env pairs it may feed: sealed at rest, delivered only to the runtimes that name it for a listed pair. A new value rolls them',
  request: { params: z.object({ name: TemplateName }), body: { content: { 'application/json': { schema: RuntimeSecretPut } }, required: true } },
  responses: { 200: { description: 'Written', content: { 'application/json': { schema: RuntimeSecretView } } }, ...errorResponses(400, 401, 403, 413) },
});

const remove = guarded('admin', {
  method: 'delete',
  path: '/runtime-secrets/{name}',
  summary: 'Remove a runtime secret (admin); refused while a live deployment names it',
  request: { params: z.object({ name: TemplateName }) },
  responses: {
    200: { description: 'Removed', content: { 'application/json': { schema: z.object({ name: z.string(), deleted: z.literal(true) }) } } },
    ...errorResponses(400, 401, 403, 404, 409),
  },
});

export function registerRuntimeSecrets(app: OpenAPIHono<AppEnv>) {
  app.openapi(list, async (c) => {
    const { limit, cursor } = c.req.valid('query');
    const page = await listRuntimeSecrets({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { workspaceId: c.get('actor').workspaceId, after: secretPages.after(cursor), limit },
    });
    return c.json(secretPages.page(page), 200);
  });
  app.openapi(put, async (c) => {
    const ctx = serviceCtx(c.get('ports'), c.get('actor').tokenId);
    const { value, feeds } = c.req.valid('json');
    const view = await putRuntimeSecret({ ctx, input: { workspaceId: c.get('actor').workspaceId, name: c.req.valid('param').name, value, feeds } });
    return c.json(view, 200);
  });
  app.openapi(remove, async (c) => {
    const name = c.req.valid('param').name;
    await deleteRuntimeSecret({ ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId), input: { workspaceId: c.get('actor').workspaceId, name } });
    return c.json({ name, deleted: true as const }, 200);
  });
}
