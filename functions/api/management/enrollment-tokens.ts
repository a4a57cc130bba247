import type { OpenAPIHono } from '@hono/zod-openapi';
import { CreateEnrollmentTokenRequest, EnrollmentTokenCreated } from '../../../shared/contracts/enrollment.js';
import { createEnrollmentToken } from '../../services/enrollment.js';
import { serviceCtx, type AppEnv } from '../../dataplane/ports.js';
import { errorResponses } from './schemas.js';
import { guarded } from '../http/guarded.js';

const route = guarded('admin', {
  method: 'post',
  path: '/enrollment-tokens',
  summary: 'Create a single-use enrollment token (shown once)',
  request: { body: { content: { 'application/json': { schema: CreateEnrollmentTokenRequest } }, required: true } },
  responses: {
    201: { description: 'Created', content: { 'application/json': { schema: EnrollmentTokenCreated } } },
    ...errorResponses(400, 401, 403, 413),
  },
});

export function registerEnrollmentTokens(app: OpenAPIHono<AppEnv>) {
  app.openapi(route, async (c) => {
    const ports = c.get('ports');
    const actor = c.get('actor');
    const created = await createEnrollmentToken({
      ctx: serviceCtx(ports, actor.tokenId),
      input: { ...c.req.valid('json'), workspaceId: actor.workspaceId },
    });
    return c.json(created, 201);
  });
}
