import pino, { type Logger } from 'pino';

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

/** The process logger: JSON to stdout, secrets and payloads redacted. */
export function createLogger(opts: { level?: string; name?: string } = {}): Logger {
  return pino({
    name: opts.name ?? 'lunanexa',
    level: opts.level ?? process.env.LUNANEXA_LOG_LEVEL ?? 'info',
    redact: { paths: REDACT_PATHS, censor: '[redacted]' },
  });
}
