import type { Context } from 'hono';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import { HTTPException } from 'hono/http-exception';
import type { AppEnv } from '../../context.js';
import type { OpenAIErrorEnvelope } from '../../../shared/contracts/openai.js';

/** An error of the OpenAI-compatible surface, answered as `{error:{message,type,code,param}}`. */
export class OpenAIError extends Error {
  constructor(
    readonly status: ContentfulStatusCode,
    readonly type: 'invalid_request_error' | 'authentication_error' | 'permission_error' | 'not_found_error' | 'rate_limit_error' | 'server_error' | 'timeout_error',
    readonly code: string | null,
    message: string,
    readonly param: string | null = null,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
}

export function openAIErrorBody(error: OpenAIError): OpenAIErrorEnvelope {
  return { error: { message: error.message, type: error.type, code: error.code, param: error.param } };
}

/** The `/v1` error formatter: OpenAI's envelope for our own errors and framework errors alike. */
export function handleOpenAIError(error: Error, c: Context<AppEnv>) {
  let mapped: OpenAIError;
  if (error instanceof OpenAIError) mapped = error;
  else if (error instanceof HTTPException && error.status < 500) {
    mapped = new OpenAIError(error.status as ContentfulStatusCode, 'invalid_request_error', null, error.message);
  } else {
    c.get('ports')?.logger.error({ err: { message: error.message, stack: error.stack }, requestId: c.get('requestId') }, 'unhandled inference error');
    mapped = new OpenAIError(500, 'server_error', 'internal_error', 'internal error');
  }
  for (const [name, value] of Object.entries(mapped.headers)) c.header(name, value);
  return c.json(openAIErrorBody(mapped), mapped.status);
}
