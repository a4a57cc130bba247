import { createMiddleware } from 'hono/factory';
import type { AppEnv } from '../context.js';

/**
 * Headers every answer carries. Nothing this origin serves is a page: answers are JSON, SSE or Prometheus text,
 * so a browser is told not to sniff another type out of them, not to leak the URL onwards, and to run, load and
 * frame nothing from them (relayed runtime answers are held to JSON and SSE as well: `relayableContentType`).
 */
export const SECURITY_HEADERS: Readonly<Record<string, string>> = {
  'X-Content-Type-Options': 'nosniff',
  'Referrer-Policy': 'no-referrer',
  'Content-Security-Policy': "default-src 'none'; frame-ancestors 'none'",
};

/** Sets `SECURITY_HEADERS` on the answer, whichever handler (or error handler) produced it. */
export const securityHeaders = createMiddleware<AppEnv>(async (c, next) => {
  await next();
  try {
    for (const [name, value] of Object.entries(SECURITY_HEADERS)) c.res.headers.set(name, value);
  } catch {
    // A response whose headers are immutable (one passed through from fetch): copy it with the headers set.
    c.res = new Response(c.res.body, c.res);
    for (const [name, value] of Object.entries(SECURITY_HEADERS)) c.res.headers.set(name, value);
  }
});
