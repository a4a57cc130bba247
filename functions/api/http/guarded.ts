import { createRoute, type RouteConfig } from '@hono/zod-openapi';
import type { Role } from '../../../shared/contracts/common.js';
import { requireRole } from './api-auth.js';

/** The OpenAPI extension on each management operation naming the least role that may call it. */
export const ROLE_EXTENSION = 'x-lunanexa-role';

/**
 * A management route that needs at least `role`: the one place a route's role is declared. It both installs the
 * check (before validation, so that an unauthenticated caller learns nothing of the input's shape) and shows it
 * in the OpenAPI document (`x-lunanexa-role`), from which docs/operations.md's "Routes and roles" is checked.
 */
export function guarded<P extends string, R extends Omit<RouteConfig, 'path' | 'middleware'> & { path: P }>(role: Exclude<Role, 'inference'>, route: R) {
  return createRoute({ ...route, middleware: [requireRole(role)] as const, [ROLE_EXTENSION]: role });
}
