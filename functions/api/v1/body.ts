import type { Context } from 'hono';
import type { z } from 'zod';
import type { AppEnv } from '../../dataplane/ports.js';
import { bodyText } from '../http/node-io.js';
import { OpenAIError, parseOpenAI } from './errors.js';

/**
 * A `/v1` JSON body of at most `maxBytes`, as `schema` reads it: 413 beyond (the connection closed, as the rest of
 * the body is not read), 400 `invalid_json` or `invalid_value` in OpenAI's envelope when it is not what it must be.
 */
export async function parseBody<S extends z.ZodType>(c: Context<AppEnv>, schema: S, maxBytes: number): Promise<z.output<S>> {
  const text = await bodyText(
    c,
    maxBytes,
    () => new OpenAIError(413, 'invalid_request_error', 'request_too_large', `request body exceeds ${maxBytes} bytes`, null, { Connection: 'close' }),
  );
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new OpenAIError(400, 'invalid_request_error', 'invalid_json', 'We could not parse the JSON body of your request.');
  }
  return parseOpenAI(schema, json);
}
