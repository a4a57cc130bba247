import type { Context } from 'hono';
import { HTTPException } from 'hono/http-exception';
import { ApiError, type ErrorCode } from '../../kernel/errors.js';
import type { AppEnv } from '../../dataplane/ports.js';
import { isDataError, isStoreUnavailable, sqlState } from '../../kernel/db-errors.js';
import { errorFields } from '../../kernel/telemetry/error-fields.js';
import { closeLingering } from './node-io.js';

function envelope(c: Context<AppEnv>, code: ErrorCode, message: string, details?: unknown) {
  const status = new ApiError(code, message).status;
  return c.json({ error: { code, message, requestId: c.get('requestId') ?? 'unknown', ...(details === undefined ? {} : { details }) } }, status);
}

/**
 * The one error formatter of `/api/v1` and `/agent/v1`: `{error:{code,message,requestId,details}}`.
 * Client mistakes keep their 4xx; anything unexpected is a 500 that is logged without the request's payload or a
 * query's parameters (`errorFields`). A value the store refuses as data (SQLSTATE class 22: a NUL byte, an integer
 * past its column, a time out of range) that got past validation is still the request's: 400, logged as a warning
 * by its SQLSTATE so that the missing bound gets added.
 */
export function handleError(error: Error, c: Context<AppEnv>) {
  // The rest of an oversized body is not parsed: the connection cannot be reused, so say so, and let the client
  // finish sending before it closes (a lingering close), so that it reads the 413 rather than a reset.
  if ((error instanceof ApiError && error.code === 'payload_too_large') || (error instanceof HTTPException && error.status === 413)) {
    c.header('Connection', 'close');
    closeLingering(c);
  }
  if (error instanceof ApiError && error.code === 'rate_limit_exceeded')
    c.header('Retry-After', String((error.details as { retryAfterS: number }).retryAfterS));
  if (error instanceof ApiError) return envelope(c, error.code, error.message, error.details);
  if (error instanceof HTTPException) {
    const status = error.status;
    if (status === 413) return envelope(c, 'payload_too_large', 'request body is too large');
    if (status === 400) return envelope(c, 'invalid_json', error.message || 'request body is not valid JSON');
    if (status === 401) return envelope(c, 'unauthorized', error.message || 'unauthorized');
    if (status === 404) return envelope(c, 'not_found', error.message || 'not found');
    if (status < 500) return envelope(c, 'bad_request', error.message || 'bad request');
  }
  if (isDataError(error)) {
    c.get('ports')?.logger.warn({ err: errorFields(error), requestId: c.get('requestId'), path: c.req.routePath }, 'a value past its bound reached the store');
    return envelope(c, 'bad_request', `a value of the request does not fit where it is stored (SQLSTATE ${sqlState(error)})`);
  }
  if (isStoreUnavailable(error)) {
    c.get('ports')?.logger.warn({ err: errorFields(error), requestId: c.get('requestId'), path: c.req.routePath }, 'the store did not answer');
    c.header('Retry-After', '1');
    return envelope(c, 'store_unavailable', 'the control plane cannot reach its store; retry later');
  }
  c.get('ports')?.logger.error({ err: errorFields(error), requestId: c.get('requestId'), path: c.req.routePath }, 'unhandled error');
  return envelope(c, 'internal', 'internal error');
}

export function notFound(c: Context<AppEnv>) {
  return envelope(c, 'not_found', `no route for ${c.req.method} ${c.req.path}`);
}
