import type { Context } from 'hono';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import { ApiError } from '../../kernel/errors.js';
import { isDataError, isStoreUnavailable } from '../../kernel/db-errors.js';
import { errorFields } from '../../kernel/telemetry/error-fields.js';
import { closeLingering } from '../http/node-io.js';
import { html } from './html.js';
import { layout } from './layout.js';
import { portsOf, type ConsoleSession } from './session.js';
import { SIGN_IN_PATH } from './guard.js';

const TITLES: Partial<Record<number, string>> = {
  400: 'The form was not accepted',
  401: 'Sign in first',
  403: 'Not allowed',
  404: 'Not found',
  409: 'It changed meanwhile',
  413: 'Too large',
  415: 'Not a form',
  503: 'The control plane is not ready',
};

/** A console error as a page: the status, a plain sentence of what was wrong, and where to go from there. */
export function errorPage(c: Context, status: ContentfulStatusCode, message: string): Response {
  const session = (c.get('session') as ConsoleSession | undefined) ?? null;
  const title = TITLES[status] ?? 'Something went wrong';
  const next =
    status === 401
      ? html`<p><a href="${SIGN_IN_PATH}">Go to the sign-in page</a></p>`
      : html`<p><a href="/">Back to the fleet</a>${session ? html` · <a href="/console/deployments">Deployments</a>` : ''}</p>`;
  const body = html`<div class="panel">
  <h1>${title}</h1>
  <p class="notice notice-error" role="alert">${message}</p>
  <p class="muted small">HTTP ${status}. Nothing was changed.</p>
  ${next}
</div>`;
  c.header('cache-control', 'no-store');
  return c.html(layout({ title, session, body }).toString(), status);
}

/**
 * The console's error handler: every refusal is a page (never the API's JSON envelope), with the status of the
 * same refusal on the API. Unexpected errors are logged without the request's payload and answered 500.
 */
export function handleConsoleError(error: Error, c: Context): Response {
  if (error instanceof ApiError) {
    if (error.code === 'payload_too_large') {
      c.header('Connection', 'close');
      closeLingering(c);
    }
    return errorPage(c, error.status, error.message);
  }
  const ports = portsOf(c);
  if (isStoreUnavailable(error)) {
    ports?.logger.warn({ err: errorFields(error), requestId: c.get('requestId'), path: c.req.routePath }, 'the store did not answer');
    c.header('Retry-After', '1');
    return errorPage(c, 503, 'The control plane cannot reach its store right now. Try again in a moment.');
  }
  if (isDataError(error)) return errorPage(c, 400, 'A value of the form does not fit where it is stored.');
  ports?.logger.error({ err: errorFields(error), requestId: c.get('requestId'), path: c.req.routePath }, 'unhandled console error');
  return errorPage(c, 500, `Internal error (request ${String(c.get('requestId') ?? 'unknown')}).`);
}
