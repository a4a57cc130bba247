import { createMiddleware } from 'hono/factory';
import { ApiError } from '../../kernel/errors.js';
import { authenticateApiToken } from '../../services/api-tokens.js';
import { roleCovers } from '../../core/token-rules.js';
import { serviceCtx, type AppEnv } from '../../dataplane/ports.js';
import { audit } from '../../services/service-context.js';
import type { Role } from '../../../shared/contracts/common.js';

/** Extracts the secret of an `Authorization: Bearer` header, or throws 401. */
export function bearer(header: string | undefined): string {
  const match = /^Bearer\s+(\S+)$/i.exec(header ?? '');
  if (!match) throw new ApiError('unauthorized', 'an Authorization: Bearer token is required');
  return match[1]!;
}

/**
 * Authenticates the API token and requires at least `role` (viewer < operator < admin). Nothing is cached: a
 * revoked or expired token is refused on its next management request, on every instance. A known token asking
 * for more than its role allows is audited (`access.denied`, outcome `denied`): who tried what is what an operator
 * looks for after a leak. Unknown tokens are not: anyone can send those, and they would fill the log.
 */
export function requireRole(role: Exclude<Role, 'inference'>) {
  return createMiddleware<AppEnv>(async (c, next) => {
    const ports = c.get('ports');
    const actor = await authenticateApiToken({ ctx: serviceCtx(ports, 'anonymous'), input: { token: bearer(c.req.header('authorization')) } });
    if (!roleCovers(actor.role, role)) {
      await audit(serviceCtx(ports, actor.tokenId), {
        workspaceId: actor.workspaceId,
        action: 'access.denied',
        target: `${c.req.method} ${c.req.routePath}`,
        outcome: 'denied',
        details: { role: actor.role, required: role },
      });
      throw new ApiError('forbidden', `this operation needs the ${role} role`);
    }
    c.set('actor', actor);
    await next();
  });
}
