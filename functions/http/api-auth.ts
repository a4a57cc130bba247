import { createMiddleware } from 'hono/factory';
import { ApiError } from '../errors.js';
import { authenticateApiToken } from '../services/api-tokens.js';
import { roleCovers } from '../services/token-rules.js';
import { serviceCtx, type AppEnv } from '../context.js';
import type { Role } from '../../shared/contracts/common.js';

/** Extracts the secret of an `Authorization: Bearer` header, or throws 401. */
export function bearer(header: string | undefined): string {
  const match = /^Bearer\s+(\S+)$/i.exec(header ?? '');
  if (!match) throw new ApiError('unauthorized', 'an Authorization: Bearer token is required');
  return match[1]!;
}

/**
 * Authenticates the API token and requires at least `role` (viewer < operator < admin). Nothing is cached: a
 * revoked or expired token is refused on its next management request, on every instance.
 */
export function requireRole(role: Exclude<Role, 'inference'>) {
  return createMiddleware<AppEnv>(async (c, next) => {
    const ports = c.get('ports');
    const actor = await authenticateApiToken({ ctx: serviceCtx(ports, 'anonymous'), input: { token: bearer(c.req.header('authorization')) } });
    if (!roleCovers(actor.role, role)) throw new ApiError('forbidden', `this operation needs the ${role} role`);
    c.set('actor', actor);
    await next();
  });
}
