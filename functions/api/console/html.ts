import { html as honoHtml, raw } from 'hono/html';
import type { HtmlEscapedString } from 'hono/utils/html';

/** Escaped HTML: what every console template returns; interpolated strings are escaped, nested `Html` is not. */
export type Html = HtmlEscapedString;

/**
 * `hono/html`'s tagged template, held to synchronous values: every console template renders from data already
 * loaded, so a page and the SSE fragment of the same section are the same string.
 */
export function html(strings: TemplateStringsArray, ...values: unknown[]): Html {
  const out = honoHtml(strings, ...values);
  if (out instanceof Promise) throw new Error('console templates render synchronously');
  return out;
}
/** Trusted markup (never anything a user or a node sent). */

/** The empty fragment. */
export const nothing: Html = raw('');
