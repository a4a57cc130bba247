import { createMiddleware } from 'hono/factory';
import type { AppEnv } from '../../dataplane/ports.js';

/**
 * Headers every answer carries. Nothing this origin serves is a page, except the console: answers are JSON, SSE or
 * Prometheus text, so a browser is told not to sniff another type out of them, not to leak the URL onwards, and to
 * run, load and frame nothing from them (relayed runtime answers are held to JSON and SSE as well:
 * `relayableContentType`).
 */
export const SECURITY_HEADERS: Readonly<Record<string, string>> = {
  'X-Content-Type-Options': 'nosniff',
  'Referrer-Policy': 'no-referrer',
  'Content-Security-Policy': "default-src 'none'; frame-ancestors 'none'",
};

/**
 * The console's pages (`functions/console/`): still nothing inline and nothing from another origin. Scripts and
 * styles only as files this origin serves (no 'unsafe-inline', no nonce needed), the page's SSE and forms only to
 * this origin, no `<base>`, never framed. Charts are inline SVG markup, which no fetch directive governs.
 */
const CONSOLE_CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/**
 * The console's pages send a referrer to this origin only: under `no-referrer` a browser sends `Origin: null` with
 * a form, and the console checks a form's Origin (functions/api/console/session.ts, `sameOrigin`). No other site
 * ever sees a console URL.
 */
const CONSOLE_REFERRER_POLICY = 'same-origin';

/** The paths the console answers: `/` and `/console/...`. Chosen by path, never by what a handler or a relayed answer set. */
function isConsolePath(path: string): boolean {
  return path === '/' || path === '/console' || path.startsWith('/console/');
}

/** Sets `SECURITY_HEADERS` on the answer, whichever handler (or error handler) produced it; the console's own CSP and referrer policy on its paths. */
export const securityHeaders = createMiddleware<AppEnv>(async (c, next) => {
  await next();
  const headers = isConsolePath(c.req.path)
    ? { ...SECURITY_HEADERS, 'Content-Security-Policy': CONSOLE_CSP, 'Referrer-Policy': CONSOLE_REFERRER_POLICY }
    : SECURITY_HEADERS;
  try {
    for (const [name, value] of Object.entries(headers)) c.res.headers.set(name, value);
  } catch {
    // A response whose headers are immutable (one passed through from fetch): copy it with the headers set.
    c.res = new Response(c.res.body, c.res);
    for (const [name, value] of Object.entries(headers)) c.res.headers.set(name, value);
  }
});
