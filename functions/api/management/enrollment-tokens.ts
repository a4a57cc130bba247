import { z, type OpenAPIHono } from '@hono/zod-openapi';
import { CreateEnrollmentTokenRequest, EnrollmentTokenCreated, EnrollmentTokenView } from '../../../shared/contracts/enrollment.js';
import { pageOf } from '../../../shared/contracts/page.js';
import { isId } from '../../../shared/ids.js';
import { createEnrollmentToken, listEnrollmentTokens, revokeEnrollmentToken } from '../../services/enrollment.js';
import { serviceCtx, type AppEnv } from '../../dataplane/ports.js';
import { errorResponses } from './schemas.js';
import { keyset, PageQuery } from './paging.js';
import { guarded } from '../http/guarded.js';

/** Enrollment tokens admit machines into the workspace: like API tokens, every route of theirs is admin-only. */
const EnrollmentTokenIdParam = z.object({ id: z.string().min(1).max(64) });

const create = guarded('admin', {
  method: 'post',
  path: '/enrollment-tokens',
  summary: 'Create a single-use enrollment token (shown once)',
  request: { body: { content: { 'application/json': { schema: CreateEnrollmentTokenRequest } }, required: true } },
  responses: {
    201: { description: 'Created', content: { 'application/json': { schema: EnrollmentTokenCreated } } },
    ...errorResponses(400, 401, 403, 413),
  },
});

const list = guarded('admin', {
  method: 'get',
  path: '/enrollment-tokens',
  summary:
    "List the workspace's enrollment tokens with their state (active, used, expired, revoked), a page at a time in creation order; never a secret or hash",
  request: { query: PageQuery },
  responses: {
    200: { description: 'Enrollment tokens', content: { 'application/json': { schema: pageOf(EnrollmentTokenView) } } },
    ...errorResponses(400, 401, 403),
  },
});

const pages = keyset(
  z.string().refine((id) => isId('enrollment', id)),
  (t: EnrollmentTokenView) => t.id,
);

const revoke = guarded('admin', {
  method: 'delete',
  path: '/enrollment-tokens/{id}',
  summary:
    'Revoke an unused enrollment token: it enrolls nothing from then on (401 `enrollment_token_revoked`). Already revoked: 409; already used: 409 (revoke its machine)',
  request: { params: EnrollmentTokenIdParam },
  responses: {
    200: { description: 'Revoked', content: { 'application/json': { schema: EnrollmentTokenView } } },
    ...errorResponses(401, 403, 404, 409),
  },
});

export function registerEnrollmentTokens(app: OpenAPIHono<AppEnv>) {
  app.openapi(create, async (c) => {
    const ports = c.get('ports');
    const actor = c.get('actor');
    const created = await createEnrollmentToken({
      ctx: serviceCtx(ports, actor.tokenId),
      input: { ...c.req.valid('json'), workspaceId: actor.workspaceId },
    });
    return c.json(created, 201);
  });
  app.openapi(list, async (c) => {
    const { limit, cursor } = c.req.valid('query');
    const actor = c.get('actor');
    const page = await listEnrollmentTokens({
      ctx: serviceCtx(c.get('ports'), actor.tokenId),
      input: { workspaceId: actor.workspaceId, after: pages.after(cursor), limit },
    });
    return c.json(pages.page(page), 200);
  });
  app.openapi(revoke, async (c) => {
    const actor = c.get('actor');
    const view = await revokeEnrollmentToken({
      ctx: serviceCtx(c.get('ports'), actor.tokenId),
      input: { workspaceId: actor.workspaceId, id: c.req.valid('param').id },
    });
    return c.json(view, 200);
  });
}
