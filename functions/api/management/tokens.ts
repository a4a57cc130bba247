import { z, type OpenAPIHono } from '@hono/zod-openapi';
import { ApiTokenCreated, ApiTokenView, CreateApiTokenRequest } from '../../../shared/contracts/tokens.js';
import { pageOf } from '../../../shared/contracts/page.js';
import { isId } from '../../../shared/ids.js';
import { createApiToken, getApiToken, listApiTokens, revokeApiToken } from '../../services/api-tokens.js';
import { serviceCtx, type AppEnv } from '../../dataplane/ports.js';
import { errorResponses } from './schemas.js';
import { keyset, PageQuery } from './paging.js';
import { guarded } from '../http/guarded.js';

/** Tokens are credentials: who holds what is an admin's business, so every token route is admin-only. */
const TokenIdParam = z.object({ id: z.string().min(1).max(64) });

const list = guarded('admin', {
  method: 'get',
  path: '/tokens',
  summary: "List the workspace's API tokens with their state (active, expired, revoked), a page at a time in creation order; never a secret or hash",
  request: { query: PageQuery },
  responses: { 200: { description: 'API tokens', content: { 'application/json': { schema: pageOf(ApiTokenView) } } }, ...errorResponses(400, 401, 403) },
});

const tokenPages = keyset(
  z.string().refine((id) => isId('token', id)),
  (t: ApiTokenView) => t.id,
);

const create = guarded('admin', {
  method: 'post',
  path: '/tokens',
  summary:
    'Create an API token (its secret is shown once); optionally issued to a member, whose role it may not exceed. Inference tokens may carry a model allow-list and a rate limit',
  request: { body: { content: { 'application/json': { schema: CreateApiTokenRequest } }, required: true } },
  responses: {
    201: { description: 'Created', content: { 'application/json': { schema: ApiTokenCreated } } },
    ...errorResponses(400, 401, 403, 404, 413),
  },
});

const get = guarded('admin', {
  method: 'get',
  path: '/tokens/{id}',
  summary: 'One API token',
  request: { params: TokenIdParam },
  responses: { 200: { description: 'API token', content: { 'application/json': { schema: ApiTokenView } } }, ...errorResponses(401, 403, 404) },
});

const revoke = guarded('admin', {
  method: 'delete',
  path: '/tokens/{id}',
  summary: 'Revoke an API token: every instance refuses it once this answers. Already revoked: 409; the last active admin token of the workspace: 409',
  request: { params: TokenIdParam },
  responses: { 200: { description: 'Revoked', content: { 'application/json': { schema: ApiTokenView } } }, ...errorResponses(401, 403, 404, 409) },
});

export function registerTokens(app: OpenAPIHono<AppEnv>) {
  app.openapi(list, async (c) => {
    const { limit, cursor } = c.req.valid('query');
    const page = await listApiTokens({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { workspaceId: c.get('actor').workspaceId, after: tokenPages.after(cursor), limit },
    });
    return c.json(tokenPages.page(page), 200);
  });
  app.openapi(create, async (c) => {
    const actor = c.get('actor');
    const created = await createApiToken({
      ctx: serviceCtx(c.get('ports'), actor.tokenId),
      input: { ...c.req.valid('json'), workspaceId: actor.workspaceId, creatorRole: actor.role },
    });
    return c.json(created, 201);
  });
  app.openapi(get, async (c) => {
    const view = await getApiToken({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { workspaceId: c.get('actor').workspaceId, tokenId: c.req.valid('param').id },
    });
    return c.json(view, 200);
  });
  app.openapi(revoke, async (c) => {
    const view = await revokeApiToken({
      ctx: serviceCtx(c.get('ports'), c.get('actor').tokenId),
      input: { workspaceId: c.get('actor').workspaceId, tokenId: c.req.valid('param').id },
    });
    return c.json(view, 200);
  });
}
