import { createMiddleware } from 'hono/factory';
import { ApiError } from '../errors.js';
import { authenticateApiToken } from '../services/api-tokens.js';
import { serviceCtx, type AppEnv } from '../context.js';
import type { Role } from '../../shared/contracts/common.js';

const RANK: Record<Role, number> = { inference: 0, viewer: 1, operator: 2, admin: 3 };

/** Extracts the secret of an `Authorization: Bearer` header, or throws 401. */
export function bearer(header: string | undefined): string {
  const match = /^Bearer\s+(\S+)$/i.exec(header ?? '');
  if (!match) throw new ApiError('unauthorized', 'an Authorization: Bearer token is required');
  return match[1]!;
}

/** Authenticates the API token and requires at least `role` (viewer < operator < admin). */
export function requireRole(role: Exclude<Role, 'inference'>) {
  return createMiddleware<AppEnv>(async (c, next) => {
    const ports = c.get('ports');
    const actor = await authenticateApiToken({ ctx: serviceCtx(ports, 'anonymous'), input: { token: bearer(c.req.header('authorization')) } });
    if (RANK[actor.role] < RANK[role]) throw new ApiError('forbidden', `this operation needs the ${role} role`);
    c.set('actor', actor);
    await next();
  });
}
