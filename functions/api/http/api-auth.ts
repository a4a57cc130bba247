import { createMiddleware } from 'hono/factory';
import { ApiError } from '../../kernel/errors.js';
import { authenticateApiToken } from '../../services/api-tokens.js';
import { roleCovers } from '../../core/token-rules.js';
import { serviceCtx, type AppEnv, type Ports } from '../../dataplane/ports.js';
import { recordAccessDenial } from '../../services/access-denials.js';
import { countTokenRequest } from '../../services/rate-limit.js';
import type { Actor } from '../../core/principals.js';
import type { Role } from '../../../shared/contracts/common.js';

/** Extracts the secret of an `Authorization: Bearer` header, or throws 401. */
export function bearer(header: string | undefined): string {
  const match = /^Bearer\s+(\S+)$/i.exec(header ?? '');
  if (!match) throw new ApiError('unauthorized', 'an Authorization: Bearer token is required');
  return match[1]!;
}

/**
 * Authenticates the API token, counts it against its management rate limit and requires at least `role` (viewer <
 * operator < admin). Nothing is cached: a revoked or expired token is refused on its next management request, on
 * every instance. A known token asking for more than its role allows is audited (`access.denied`, outcome
 * `denied`): who tried what is what an operator looks for after a leak; once per token, route and minute, with the
 * minute's count after it (`recordAccessDenial`). Unknown tokens are not: anyone can send those, and they would fill
 * the log.
 */
export function requireRole(role: Exclude<Role, 'inference'>) {
  return createMiddleware<AppEnv>(async (c, next) => {
    const ports = c.get('ports');
    const actor = await authenticateApiToken({ ctx: serviceCtx(ports, 'anonymous'), input: { token: bearer(c.req.header('authorization')) } });
    await countManagementRequest(ports, actor);
    if (!roleCovers(actor.role, role)) {
      await recordAccessDenial({
        ctx: serviceCtx(ports, actor.tokenId),
        input: { workspaceId: actor.workspaceId, tokenId: actor.tokenId, target: `${c.req.method} ${c.req.routePath}`, role: actor.role, required: role },
      });
      throw new ApiError('forbidden', `this operation needs the ${role} role`);
    }
    c.set('actor', actor);
    await next();
  });
}

/**
 * Counts one management request of `actor` in its one-minute window, exactly across instances (one upsert, as on
 * `/v1`, apart from the `/v1` count), and refuses it past `managementRateLimitPerMinute`, or the token's own lower
 * `rateLimitPerMinute`: 429 `rate_limit_exceeded` with `Retry-After`, before anything else is done or audited.
 */
async function countManagementRequest(ports: Ports, actor: Actor): Promise<void> {
  const configured = ports.config.managementRateLimitPerMinute;
  const limit = Math.min(configured || Number.POSITIVE_INFINITY, actor.rateLimitPerMinute ?? Number.POSITIVE_INFINITY);
  if (limit === Number.POSITIVE_INFINITY) return;
  const verdict = await countTokenRequest(ports.store.statements ?? ports.store.db, { tokenId: actor.tokenId, limit, surface: 'api' });
  if (!verdict.ok)
    throw new ApiError('rate_limit_exceeded', `this token made its ${limit} management requests per minute; retry in ${verdict.retryAfterS} s`, {
      retryAfterS: verdict.retryAfterS,
    });
}
