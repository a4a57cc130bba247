import { z, type OpenAPIHono } from '@hono/zod-openapi';
import { RuntimeTemplateSpec, RuntimeTemplateView, TemplateName } from '../../../shared/contracts/runtime-template.js';
import { pageOf } from '../../../shared/contracts/page.js';
import { deleteRuntimeTemplate, getRuntimeTemplate, listRuntimeTemplates, putRuntimeTemplate } from '../../services/runtime-templates.js';
import { serviceCtx, type AppEnv } from '../../dataplane/ports.js';
import { errorResponses } from './schemas.js';
import { guarded } from '../http/guarded.js';
import { keyset, PageQuery } from './paging.js';

const list = guarded('viewer', {
  method: 'get',
  path: '/runtime-templates',
  summary: 'List the runtime templates deployments may run, a page at a time by name',
  request: { query: PageQuery },
  responses: {
    200: { description: 'Runtime templates', content: { 'application/json': { schema: pageOf(RuntimeTemplateView) } } },
    ...errorResponses(400, 401, 403),
  },
});

const templatePages = keyset(TemplateName, (t: RuntimeTemplateView) => t.name);

const get = guarded('viewer', {
  method: 'get',
  path: '/runtime-templates/{name}',
  summary: 'One runtime template',
  request: { params: z.object({ name: TemplateName }) },
  responses: {
    200: { description: 'Runtime template', content: { 'application/json': { schema: RuntimeTemplateView } } },
    ...errorResponses(400, 401, 403, 404),
  },
});

const put = guarded('admin', {
  method: 'put',
  path: '/runtime-templates/{name}',
  summary:
    'Register or replace a runtime template (admin): a pinned executable, typed params, allowed env. A changed template rolls the deployments that use it',
  request: { params: z.object({ name: TemplateName }), body: { content: { 'application/json': { schema: RuntimeTemplateSpec } }, required: true } },
  responses: {
    200: { description: 'Registered', content: { 'application/json': { schema: RuntimeTemplateView } } },
    ...errorResponses(400, 401, 403, 409, 413),
  },
});

const remove = guarded('admin', {
  method: 'delete',
  path: '/runtime-templates/{name}',
  summary: 'Remove a runtime template (admin); refused while a live deployment uses it',
  request: { params: z.object({ name: TemplateName }) },
  responses: {
    200: { description: 'Removed', content: { 'application/json': { schema: z.object({ name: z.string(), deleted: z.literal(true) }) } } },
    ...errorResponses(400, 401, 403, 404, 409),
  },
});

export function registerRuntimeTemplates(app: OpenAPIHono<AppEnv>) {
  app.openapi(list, async (c) => {
    const { limit, cursor } = c.req.valid('query');
    const page = await listRuntimeTemplates({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { workspaceId: c.get('actor').workspaceId, after: templatePages.after(cursor), limit },
    });
    return c.json(templatePages.page(page), 200);
  });
  app.openapi(get, async (c) => {
    const view = await getRuntimeTemplate({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { workspaceId: c.get('actor').workspaceId, name: c.req.valid('param').name },
    });
    return c.json(view, 200);
  });
  app.openapi(put, async (c) => {
    const ctx = serviceCtx(c.get('ports'), c.get('actor').tokenId);
    const { view } = await putRuntimeTemplate({
      ctx,
      input: { workspaceId: c.get('actor').workspaceId, name: c.req.valid('param').name, spec: c.req.valid('json') },
    });
    return c.json(view, 200);
  });
  app.openapi(remove, async (c) => {
    const name = c.req.valid('param').name;
    await deleteRuntimeTemplate({ ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId), input: { workspaceId: c.get('actor').workspaceId, name } });
    return c.json({ name, deleted: true as const }, 200);
  });
}
