import { html, nothing, type Html } from './html.js';
import { assetUrl } from './assets.js';
import { isoOf, utc } from './format.js';
import { allows, type ConsoleSession } from './session.js';
import type { Role } from '../../../shared/contracts/common.js';

/** The console's pages, in navigation order, with the role each needs (the API's rule for the same data). */
const PAGES = [
  { key: 'fleet', href: '/', label: 'Fleet', role: 'viewer' },
  { key: 'deployments', href: '/console/deployments', label: 'Deployments', role: 'viewer' },
  { key: 'runs', href: '/console/runs', label: 'Runs', role: 'viewer' },
  { key: 'jobs', href: '/console/jobs', label: 'Jobs', role: 'viewer' },
  { key: 'requests', href: '/console/requests', label: 'Requests', role: 'viewer' },
  { key: 'tokens', href: '/console/tokens', label: 'Tokens', role: 'admin' },
  { key: 'usage', href: '/console/usage', label: 'Usage', role: 'viewer' },
  { key: 'audit', href: '/console/audit', label: 'Audit', role: 'admin' },
] as const satisfies ReadonlyArray<{ key: string; href: string; label: string; role: Exclude<Role, 'inference'> }>;
export type PageKey = (typeof PAGES)[number]['key'];

/** A hidden CSRF field: every state-changing form of a signed-in page carries it. */
export function csrfField(session: Pick<ConsoleSession, 'csrf'>): Html {
  return html`<input type="hidden" name="_csrf" value="${session.csrf}">`;
}

/** A state as a coloured badge (the stylesheet's `state-*`), its text the state unless given. */
export function badge(state: string, text: string = state): Html {
  return html`<span class="badge state-${state}">${text}</span>`;
}

/** A time as every page shows it: UTC to the second, machine-readable in `datetime`. */
export function when(at: Date | string | null | undefined): Html {
  return at ? html`<time datetime="${isoOf(at)}">${utc(at)}</time>` : html`<span class="muted">–</span>`;
}

/** A notice at the top of a page (after an action), announced to screen readers. */
export function notice(text: string | null | undefined, kind: 'ok' | 'error' = 'ok'): Html {
  if (!text) return nothing;
  return kind === 'error' ? html`<p class="notice notice-error" role="alert">${text}</p>` : html`<p class="notice" role="status">${text}</p>`;
}

/**
 * The page shell: skip link, banner with the navigation and the signed-in role, the main landmark, and the live
 * status line the page's script updates. `live` names the SSE view the script subscribes to (none: a static page).
 */
export function layout(input: { title: string; session: ConsoleSession | null; active?: PageKey; live?: string; body: Html }): Html {
  const { session } = input;
  const nav = session
    ? html`<nav aria-label="Console">
        <ul class="nav">
          ${PAGES.filter((p) => allows(session, p.role)).map(
            (p) => html`<li><a href="${p.href}"${p.key === input.active ? html` aria-current="page"` : nothing}>${p.label}</a></li>`,
          )}
        </ul>
      </nav>
      <div class="who">
        <span class="role role-${session.role}" title="the role of the API token you signed in with">${session.role}</span>
        <form method="post" action="/console/sign-out" class="inline">
          ${csrfField(session)}
          <button type="submit" class="link">Sign out</button>
        </form>
      </div>`
    : nothing;
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>${input.title} · LunaNexa console</title>
<link rel="icon" href="${assetUrl('icon.svg')}" type="image/svg+xml">
<link rel="stylesheet" href="${assetUrl('console.css')}">
<script src="${assetUrl('console.js')}" defer></script>
</head>
<body${input.live ? html` data-live="${input.live}"` : nothing}>
<a class="skip" href="#main">Skip to content</a>
<header class="banner">
  <a class="brand" href="/"><span aria-hidden="true">◐</span> LunaNexa</a>
  ${nav}
</header>
<main id="main" tabindex="-1">
${input.body}
</main>
<footer class="footer">
  ${input.live ? html`<p id="live-status" role="status" class="live">Live updates are off: reload the page to refresh it.</p>` : html`<p class="live">&nbsp;</p>`}
</footer>
</body>
</html>`;
}
