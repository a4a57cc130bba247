import type { Hono } from 'hono';
import { z } from 'zod';
import { AuditOutcome, type AuditEntry, type ChainVerdict } from '../../../shared/contracts/audit.js';
import { serviceCtx } from '../../dataplane/ports.js';
import { ApiError } from '../../kernel/errors.js';
import { listAuditPage, verifyAuditChain } from '../../services/audit.js';
import { tokenNames } from '../../services/api-tokens.js';
import { machineNames } from '../../services/machines.js';
import { html, nothing, type Html } from './html.js';
import { badge, layout, when } from './layout.js';
import { portsOf, type ConsoleEnv } from './session.js';
import { signedIn } from './guard.js';

const PAGE = 50;

const optional = (schema: z.ZodString) =>
  z
    .string()
    .trim()
    .optional()
    .transform((v) => (v === undefined || v === '' ? undefined : v))
    .pipe(schema.optional());

/** The log's filters, as the page's GET form sends them (reading changes nothing: no CSRF token). */
const AuditFilter = z.object({
  action: optional(z.string().max(256)),
  actor: optional(z.string().max(256)),
  outcome: z
    .string()
    .optional()
    .transform((v) => (v === undefined || v === '' ? undefined : v))
    .pipe(AuditOutcome.optional()),
  before: optional(z.string().regex(/^\d{1,15}$/, 'before is an entry number')),
  verify: z.literal('1').optional(),
});

function verdictPanel(verdict: ChainVerdict): Html {
  return verdict.ok
    ? html`<p class="notice" role="status" id="chain-verdict">The chain is intact: ${verdict.entries} entries (${verdict.legacy} from before the chain).
      Head <span class="mono">${verdict.head.slice(0, 16)}…</span>: keep it elsewhere to tell a chain cut short later.</p>`
    : html`<p class="notice notice-error" role="alert" id="chain-verdict">The chain is broken at entry ${verdict.brokenAt.seq}
      (<span class="mono">${verdict.brokenAt.id}</span>): ${verdict.reason}.</p>`;
}

function entryRow(e: AuditEntry, names: Map<string, string>): Html {
  const outcome = e.outcome === 'succeeded' ? 'ready' : e.outcome === 'denied' ? 'stale' : 'failed';
  const details = Object.keys(e.details).length === 0 ? '' : JSON.stringify(e.details);
  return html`<tr>
    <th scope="row" class="num">${e.seq}</th>
    <td data-label="When">${when(e.at)}</td>
    <td data-label="Actor">${names.get(e.actor) ?? e.actor}${names.has(e.actor) ? html`<br><span class="small muted mono">${e.actor}</span>` : nothing}</td>
    <td data-label="Action" class="mono">${e.action}</td>
    <td data-label="Target">${names.get(e.target) ?? html`<span class="mono">${e.target}</span>`}</td>
    <td data-label="Outcome">${badge(outcome, e.outcome)}</td>
    <td data-label="Details" class="small mono wrap">${details.length > 300 ? `${details.slice(0, 300)}…` : details}</td>
  </tr>`;
}

/** `GET /console/audit`: the workspace's audit log, newest first, filtered and paged by a GET form; `?verify=1` checks the chain. */
export function registerAudit(app: Hono<ConsoleEnv>): void {
  // The audit log is an admin's, as on the API (`functions/api/management/audit.ts`).
  app.get('/console/audit', signedIn('admin'), async (c) => {
    const parsed = AuditFilter.safeParse(c.req.query());
    if (!parsed.success) throw new ApiError('validation_failed', `the filter is not valid: ${parsed.error.issues[0]?.message ?? 'invalid'}`);
    const filter = parsed.data;
    const session = c.get('session');
    const ports = portsOf(c);
    const ctx = serviceCtx(ports, session.tokenId);
    const page = await listAuditPage({
      ctx,
      input: {
        workspaceId: session.workspaceId,
        action: filter.action,
        actor: filter.actor,
        outcome: filter.outcome,
        after: filter.before === undefined ? undefined : Number(filter.before),
        limit: PAGE,
      },
    });
    const verdict = filter.verify ? await verifyAuditChain({ ctx, input: { workspaceId: session.workspaceId } }) : null;
    // Tokens and machines by name, so that an operator reads who did what to which machine.
    const tokens = await tokenNames({ ctx, input: { workspaceId: session.workspaceId } });
    const fleet = await machineNames({ ctx, input: { workspaceId: session.workspaceId } });
    const names = new Map([...tokens, ...fleet]);
    const older = page.more ? page.items.at(-1)?.seq : undefined;
    const keep = new URLSearchParams(
      Object.entries({ action: filter.action, actor: filter.actor, outcome: filter.outcome }).flatMap(([k, v]) => (v ? [[k, v]] : [])),
    );
    const body = html`<h1>Audit log</h1>
<p class="lede">Who did what, to which object, and how it ended: append-only and hash-chained, newest first.</p>
${verdict ? verdictPanel(verdict) : nothing}
<form method="get" action="/console/audit" class="panel row" aria-label="Filter the audit log">
  <div><label for="audit-action">Action</label><input id="audit-action" name="action" type="text" value="${filter.action ?? ''}" placeholder="machine.drain"></div>
  <div><label for="audit-actor">Actor</label><input id="audit-actor" name="actor" type="text" value="${filter.actor ?? ''}" placeholder="tok_…"></div>
  <div><label for="audit-outcome">Outcome</label><select id="audit-outcome" name="outcome"><option value="">any</option>${AuditOutcome.options.map(
    (o) => html`<option value="${o}"${o === filter.outcome ? html` selected` : nothing}>${o}</option>`,
  )}</select></div>
  <button type="submit">Filter</button>
  <button type="submit" name="verify" value="1">Verify the chain</button>
</form>
${
  page.items.length === 0
    ? html`<p class="panel">No entry${filter.action || filter.actor || filter.outcome ? ' matches this filter' : ''}.</p>`
    : html`<div class="table-wrap"><table class="grid" id="audit">
  <caption class="vh">Audit entries, newest first</caption>
  <thead><tr><th scope="col" class="num">#</th><th scope="col">When</th><th scope="col">Actor</th><th scope="col">Action</th><th scope="col">Target</th><th scope="col">Outcome</th><th scope="col">Details</th></tr></thead>
  <tbody>${page.items.map((e) => entryRow(e, names))}</tbody></table></div>`
}
${older !== undefined ? html`<p><a href="/console/audit?${keep.toString()}${keep.size > 0 ? '&' : ''}before=${older}">Older entries</a></p>` : nothing}`;
    return c.html(layout({ title: 'Audit log', session, active: 'audit', body }).toString());
  });
}
