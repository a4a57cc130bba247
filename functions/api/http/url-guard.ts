import { createMiddleware } from 'hono/factory';
import { ApiError } from '../../kernel/errors.js';
import type { AppEnv } from '../../dataplane/ports.js';

/** Longest path and query accepted: every route's parameters are ids and names of at most a few hundred characters. */
const MAX_URL_CHARS = 2_048;

/** A percent-encoded C0 control character or DEL (%00 NUL included): in no id, name or number of any route. */
const ENCODED_CONTROL = /%(?:[01][0-9a-f]|7f)/i;

/**
 * Refuses a URL that carries a control character (400) or is overlong (414) before any route sees it: path
 * parameters reach the store, and PostgreSQL refuses a NUL byte with an error of its own (a 500, were it let
 * through). Node's parser and the Workers runtime already refuse raw control characters; these are the encoded ones.
 */
export const urlGuard = createMiddleware<AppEnv>(async (c, next) => {
  const url = c.req.url;
  const at = url.indexOf('/', url.indexOf('//') + 2);
  const pathAndQuery = at < 0 ? '' : url.slice(at);
  if (pathAndQuery.length > MAX_URL_CHARS) throw new ApiError('uri_too_long', `the URL exceeds ${MAX_URL_CHARS} characters`);
  if (ENCODED_CONTROL.test(pathAndQuery)) throw new ApiError('bad_request', 'the URL carries a control character (such as %00)');
  await next();
});
