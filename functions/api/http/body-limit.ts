import type { MiddlewareHandler } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { ApiError } from '../../kernel/errors.js';

/**
 * A NUL character in a body, raw or as the JSON escape `\u0000` (one preceded by an even number of backslashes:
 * `\\u0000` is a backslash and the text "u0000"). No field of the management or agent surface accepts one, and
 * PostgreSQL refuses it in text and jsonb with an error of its own.
 */
const NUL = /\u0000|(?<!\\)(?:\\\\)*\\u0000/;

/**
 * Rejects bodies over `maxSize` bytes with 413 before they are buffered, then (once the body is within the
 * limit) one carrying a NUL character with 400, so that it never reaches a service or the store. The text is
 * read once: handlers and validators reuse Hono's cached body.
 */
export function limitBody(maxSize: number): MiddlewareHandler {
  const limit = bodyLimit({
    maxSize,
    onError: () => {
      throw new ApiError('payload_too_large', `request body exceeds ${maxSize} bytes`);
    },
  });
  return (c, next) =>
    limit(c, async () => {
      if (c.req.raw.body && NUL.test(await c.req.text())) {
        throw new ApiError('validation_failed', 'the request body carries a NUL character (\\u0000), which no field accepts', [
          { path: '', message: 'NUL character' },
        ]);
      }
      await next();
    });
}
