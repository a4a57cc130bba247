import { z, type OpenAPIHono } from '@hono/zod-openapi';
import { AliasName, AliasRollbackRequest, AliasView, SetAliasRequest } from '../../../shared/contracts/registry.js';
import { pageOf } from '../../../shared/contracts/page.js';
import { listAliases, rollbackAlias, setAlias } from '../../services/aliases.js';
import { serviceCtx, type AppEnv } from '../../dataplane/ports.js';
import { errorResponses } from './schemas.js';
import { keyset, PageQuery } from './paging.js';
import { guarded } from '../http/guarded.js';

/** Moving an alias changes what its consumers get: a policy decision, so an admin's, with a reason every time. */
const AliasParam = z.object({ alias: AliasName });

const list = guarded('viewer', {
  method: 'get',
  path: '/aliases',
  summary: "List the workspace's aliases and the versions they point at, a page at a time by name",
  request: { query: PageQuery },
  responses: { 200: { description: 'Aliases', content: { 'application/json': { schema: pageOf(AliasView) } } }, ...errorResponses(400, 401, 403) },
});

const aliasPages = keyset(AliasName, (a: AliasView) => a.name);

const put = guarded('admin', {
  method: 'put',
  path: '/aliases/{alias}',
  summary: 'Point an alias at an approved (or later) version of a model, with a reason; creates it if need be. Audited with who and why',
  request: { params: AliasParam, body: { content: { 'application/json': { schema: SetAliasRequest } }, required: true } },
  responses: { 200: { description: 'The alias', content: { 'application/json': { schema: AliasView } } }, ...errorResponses(400, 401, 403, 404, 409, 413) },
});

const rollback = guarded('admin', {
  method: 'post',
  path: '/aliases/{alias}/rollback',
  summary: 'Move an alias back one step, to the version it pointed at before its latest move; with a reason. No earlier version: 409',
  request: { params: AliasParam, body: { content: { 'application/json': { schema: AliasRollbackRequest } }, required: true } },
  responses: { 200: { description: 'The alias', content: { 'application/json': { schema: AliasView } } }, ...errorResponses(400, 401, 403, 404, 409, 413) },
});

export function registerAliases(app: OpenAPIHono<AppEnv>) {
  app.openapi(list, async (c) => {
    const { limit, cursor } = c.req.valid('query');
    const page = await listAliases({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { workspaceId: c.get('actor').workspaceId, after: aliasPages.after(cursor), limit },
    });
    return c.json(aliasPages.page(page), 200);
  });
  app.openapi(put, async (c) => {
    const view = await setAlias({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { ...c.req.valid('json'), workspaceId: c.get('actor').workspaceId, alias: c.req.valid('param').alias },
    });
    return c.json(view, 200);
  });
  app.openapi(rollback, async (c) => {
    const view = await rollbackAlias({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { ...c.req.valid('json'), workspaceId: c.get('actor').workspaceId, alias: c.req.valid('param').alias },
    });
    return c.json(view, 200);
  });
}
