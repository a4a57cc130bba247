import type { Context } from 'hono';
import type { z } from 'zod';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import { HTTPException } from 'hono/http-exception';
import type { AppEnv } from '../../dataplane/ports.js';
import type { OpenAIErrorEnvelope } from '../../../shared/contracts/openai.js';
import type { InferenceError, InferenceErrorKind } from '../../dataplane/result.js';
import { ApiError } from '../../kernel/errors.js';
import { isDataError, isStoreUnavailable, sqlState } from '../../kernel/db-errors.js';
import { errorFields } from '../../kernel/telemetry/error-fields.js';
import { closeLingering } from '../http/node-io.js';

/** An error of the OpenAI-compatible surface, answered as `{error:{message,type,code,param}}`. */
export class OpenAIError extends Error {
  constructor(
    readonly status: ContentfulStatusCode,
    readonly type:
      | 'invalid_request_error'
      | 'authentication_error'
      | 'permission_error'
      | 'not_found_error'
      | 'rate_limit_error'
      | 'server_error'
      | 'timeout_error',
    readonly code: string | null,
    message: string,
    readonly param: string | null = null,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
}

/** `value` as `schema` reads it, or a 400 `invalid_value` naming the first field that is wrong. */
export function parseOpenAI<S extends z.ZodType>(schema: S, value: unknown): z.output<S> {
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0]!;
  const param = issue.path.length ? issue.path.join('.') : null;
  throw new OpenAIError(400, 'invalid_request_error', 'invalid_value', `${issue.message}${param ? ` (${param})` : ''}`, param);
}

function openAIErrorBody(error: OpenAIError): OpenAIErrorEnvelope {
  return { error: { message: error.message, type: error.type, code: error.code, param: error.param } };
}

/** The answer carrying `error`: its envelope, status and headers. */
export function openAIErrorResponse(c: Context<AppEnv>, error: OpenAIError) {
  for (const [name, value] of Object.entries(error.headers)) c.header(name, value);
  return c.json(openAIErrorBody(error), error.status);
}

/** How each way an inference can fail reads on OpenAI's wire: status and error type. */
const INFERENCE_ERRORS: Record<InferenceErrorKind, { status: ContentfulStatusCode; type: OpenAIError['type'] }> = {
  not_found: { status: 404, type: 'not_found_error' },
  capacity: { status: 429, type: 'rate_limit_error' },
  unavailable: { status: 503, type: 'server_error' },
  deadline: { status: 504, type: 'timeout_error' },
  // nginx's "client closed request": nobody reads it, but the access log and the workload record say why.
  cancelled: { status: 499 as ContentfulStatusCode, type: 'invalid_request_error' },
  bad_gateway: { status: 502, type: 'server_error' },
  conflict: { status: 409, type: 'invalid_request_error' },
};

export function openAIErrorOf(error: InferenceError): OpenAIError {
  const { status, type } = INFERENCE_ERRORS[error.kind];
  const headers: Record<string, string> = {};
  if (error.retryAfterS !== undefined) headers['Retry-After'] = String(error.retryAfterS);
  if (error.workloadId !== undefined) headers['X-LunaNexa-Workload-Id'] = error.workloadId;
  // The only thing an inference request can name that does not exist is its model.
  return new OpenAIError(status, type, error.code, error.message, error.kind === 'not_found' ? 'model' : null, headers);
}

/** The SSE event that ends a stream broken after its first byte, in the OpenAI error envelope. */
export function errorEvent(code: string, message: string): string {
  return `data: ${JSON.stringify(openAIErrorBody(new OpenAIError(502, 'server_error', code, message)))}\n\n`;
}

/** OpenAI's error type of a client error's status. */
function typeOfStatus(status: number): OpenAIError['type'] {
  if (status === 401) return 'authentication_error';
  if (status === 403) return 'permission_error';
  if (status === 404) return 'not_found_error';
  return 'invalid_request_error';
}

/**
 * The `/v1` error formatter: OpenAI's envelope for our own errors, the shared layers' (`ApiError`: a refused
 * URL, say) and framework errors alike. Unexpected errors are logged without payloads or query parameters; a
 * value the store refuses as data is the request's (400), as on the other surfaces.
 */
export function handleOpenAIError(error: Error, c: Context<AppEnv>) {
  let mapped: OpenAIError;
  if (error instanceof OpenAIError) mapped = error;
  else if (error instanceof ApiError && error.status < 500) {
    mapped = new OpenAIError(error.status, typeOfStatus(error.status), error.code, error.message);
  } else if (error instanceof HTTPException && error.status < 500) {
    mapped = new OpenAIError(error.status as ContentfulStatusCode, typeOfStatus(error.status), null, error.message);
  } else if (isDataError(error)) {
    c.get('ports')?.logger.warn({ err: errorFields(error), requestId: c.get('requestId') }, 'a value past its bound reached the store');
    mapped = new OpenAIError(
      400,
      'invalid_request_error',
      'invalid_value',
      `a value of the request does not fit where it is stored (SQLSTATE ${sqlState(error)})`,
    );
  } else if (isStoreUnavailable(error)) {
    c.get('ports')?.logger.warn({ err: errorFields(error), requestId: c.get('requestId') }, 'the store did not answer');
    mapped = new OpenAIError(503, 'server_error', 'service_unavailable', 'the service cannot reach its store; retry later', null, { 'Retry-After': '1' });
  } else {
    c.get('ports')?.logger.error({ err: errorFields(error), requestId: c.get('requestId') }, 'unhandled inference error');
    mapped = new OpenAIError(500, 'server_error', 'internal_error', 'internal error');
  }
  // An oversized body's answer closes the connection after the client has finished sending (functions/api/http/errors.ts).
  if (mapped.status === 413) closeLingering(c);
  return openAIErrorResponse(c, mapped);
}
