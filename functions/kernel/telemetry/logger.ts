import pino, { type DestinationStream, type Logger } from 'pino';
import { errorFields } from './error-fields.js';

export type { Logger };

/** Paths that may hold secrets; pino replaces them before anything is written. */
export const REDACT_PATHS = [
  'authorization',
  '*.authorization',
  'headers.authorization',
  'req.headers.authorization',
  'token',
  '*.token',
  'privateKey',
  '*.privateKey',
  'body',
  '*.body',
  'payload',
  '*.payload',
];

/**
 * `err`, whatever a call site passes (an error, or its message), is logged without query parameters or the values
 * a database error repeats (`errorFields`).
 */
export const LOG_SERIALIZERS = { err: errorFields };

/** The process logger: JSON to stdout (or `destination`), secrets, payloads and query parameters left out. */
export function createLogger(opts: { level?: string; name?: string; destination?: DestinationStream } = {}): Logger {
  return pino(
    {
      name: opts.name ?? 'lunanexa',
      level: opts.level ?? process.env.LUNANEXA_LOG_LEVEL ?? 'info',
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
      serializers: LOG_SERIALIZERS,
    },
    opts.destination,
  );
}
