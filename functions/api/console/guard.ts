import type { Context } from 'hono';
import { createMiddleware } from 'hono/factory';
import type { z } from 'zod';
import { ApiError, zodDetails } from '../../kernel/errors.js';
import { allows, checkCsrf, clearSessionCookie, currentSession, portsOf, requireRoleOf, type ConsoleEnv, type ConsoleSession } from './session.js';
import { recordAccessDenial } from '../../services/access-denials.js';
import { serviceCtx } from '../../dataplane/ports.js';
import type { Role } from '../../../shared/contracts/common.js';

/** Where an unauthenticated page request is sent. */
export const SIGN_IN_PATH = '/console/sign-in';

/**
 * Requires a live session (and at least `role`): a page asked for without one is sent to the sign-in form (303);
 * anything else (a form, the event stream) is refused 401. A session below `role` is refused 403 and audited
 * (`access.denied`, as on the API). A cookie naming a session that is no longer live
 * (signed out, expired, its token revoked) is cleared.
 */
export function signedIn(role: Exclude<Role, 'inference'> = 'viewer') {
  return createMiddleware<ConsoleEnv>(async (c, next) => {
    const session = await currentSession(c);
    if (!session) {
      if (c.req.header('cookie')?.includes('lnx_session=')) clearSessionCookie(c);
      if (c.req.method === 'GET' && !c.req.path.startsWith('/console/events')) return c.redirect(SIGN_IN_PATH, 303);
      throw new ApiError('unauthorized', 'you are not signed in, or your session ended; sign in again');
    }
    if (!allows(session, role)) {
      // As the API's requireRole: a known token asking for more than its role allows is audited, once per token,
      // route and minute with the minute's count after it (`recordAccessDenial`).
      await recordAccessDenial({
        ctx: serviceCtx(portsOf(c), session.tokenId),
        input: { workspaceId: session.workspaceId, tokenId: session.tokenId, target: `${c.req.method} ${c.req.routePath}`, role: session.role, required: role },
      });
      requireRoleOf(session, role);
    }
    c.set('session', session);
    c.header('cache-control', 'no-store');
    await next();
  });
}

/**
 * Reads a state-changing console form: a form body only (415 otherwise), checked for this origin and the session's
 * CSRF token before anything else (403), then validated with `schema` (400 naming the field). Nothing is changed
 * before all three pass.
 */
export async function readForm<S extends z.ZodType>(c: Context<ConsoleEnv>, schema: S, session: ConsoleSession | null): Promise<z.output<S>> {
  const fields = await formFields(c);
  if (session) checkCsrf(c, session, fields._csrf);
  const parsed = schema.safeParse(fields);
  if (!parsed.success) {
    const first = parsed.error.issues[0];
    throw new ApiError('validation_failed', first?.message ?? 'the form is not valid', zodDetails(parsed.error));
  }
  return parsed.data;
}

/** The fields of a form body (`application/x-www-form-urlencoded`); a field given twice is refused. */
export async function formFields(c: Context): Promise<Record<string, string>> {
  const type = c.req.header('content-type') ?? '';
  if (!/^application\/x-www-form-urlencoded\s*(;|$)/i.test(type)) {
    throw new ApiError('unsupported_media_type', 'the console accepts HTML forms only (application/x-www-form-urlencoded)');
  }
  const params = new URLSearchParams(await c.req.text());
  const fields: Record<string, string> = {};
  for (const [key, value] of params) {
    if (Object.hasOwn(fields, key)) throw new ApiError('validation_failed', `the form field ${key} was given more than once`);
    fields[key] = value;
  }
  return fields;
}
