import type { Context, Hono } from 'hono';
import { z } from 'zod';
import { USAGE_COLUMNS, type UsageRow } from '../../../shared/contracts/usage.js';
import { toCsv } from '../../../shared/csv.js';
import { serviceCtx } from '../../dataplane/ports.js';
import { ApiError } from '../../kernel/errors.js';
import { usageQuery, usageReport, usageRetention, USAGE_DEFAULT_DAYS, USAGE_MAX_DAYS } from '../../services/usage.js';
import { html, nothing, type Html } from './html.js';
import { layout } from './layout.js';
import { num } from './format.js';
import { portsOf, type ConsoleEnv } from './session.js';
import { signedIn } from './guard.js';

/** The report's filters, as the page's GET form sends them (reading never changes anything: no CSRF token). */
const UsageFilter = z.object({
  from: z.string().max(10).optional(),
  to: z.string().max(10).optional(),
  groupBy: z.string().max(32).optional(),
});

/** Groupings the form offers: the API's `groupBy` values. */
const GROUPINGS = [
  { value: 'day,token,model', label: 'day, token and model' },
  { value: 'day', label: 'day' },
  { value: 'token', label: 'token' },
  { value: 'model', label: 'model' },
  { value: 'day,model', label: 'day and model' },
  { value: 'token,model', label: 'token and model' },
] as const;

function emptyToUndefined(value: string | undefined): string | undefined {
  return value === undefined || value.trim() === '' ? undefined : value.trim();
}

function reportTable(rows: readonly UsageRow[]): Html {
  if (rows.length === 0) return html`<p class="panel" id="no-usage">No inference requests in these days.</p>`;
  const total = rows.reduce(
    (sum, r) => ({ requests: sum.requests + r.requests, prompt: sum.prompt + r.promptTokens, completion: sum.completion + r.completionTokens }),
    { requests: 0, prompt: 0, completion: 0 },
  );
  return html`<div class="table-wrap"><table class="grid" id="usage">
  <caption>Usage by group, in day, token and model order</caption>
  <thead><tr><th scope="col">Day</th><th scope="col">Token</th><th scope="col">Model</th><th scope="col" class="num">Requests</th>
    <th scope="col" class="num">Prompt tokens</th><th scope="col" class="num">Completion tokens</th></tr></thead>
  <tbody>${rows.map(
    (r) => html`<tr>
    <th scope="row">${r.day ?? html`<span class="muted">all days</span>`}</th>
    <td data-label="Token">${r.tokenName ?? r.tokenId ?? html`<span class="muted">${r.day !== null || r.model !== null ? '–' : 'all tokens'}</span>`}</td>
    <td data-label="Model" class="mono">${r.model ?? '–'}</td>
    <td data-label="Requests" class="num">${num(r.requests)}</td>
    <td data-label="Prompt tokens" class="num">${num(r.promptTokens)}</td>
    <td data-label="Completion tokens" class="num">${num(r.completionTokens)}</td>
  </tr>`,
  )}
  <tr><th scope="row">Total</th><td data-label="Token"></td><td data-label="Model"></td><td data-label="Requests" class="num"><strong>${num(total.requests)}</strong></td>
    <td data-label="Prompt tokens" class="num"><strong>${num(total.prompt)}</strong></td><td data-label="Completion tokens" class="num"><strong>${num(total.completion)}</strong></td></tr>
  </tbody></table></div>`;
}

/** `GET /console/usage` (the report, filtered by a GET form) and `GET /console/usage.csv` (the same rows as CSV). */
export function registerUsage(app: Hono<ConsoleEnv>): void {
  const read = async (c: Context<ConsoleEnv>) => {
    const filter = UsageFilter.safeParse(c.req.query());
    if (!filter.success) throw new ApiError('validation_failed', 'from and to are dates (YYYY-MM-DD); groupBy is day, token and/or model');
    const asked = { from: emptyToUndefined(filter.data.from), to: emptyToUndefined(filter.data.to), groupBy: emptyToUndefined(filter.data.groupBy) };
    const session = c.get('session');
    const ports = portsOf(c);
    // The API's own checks and defaults (400 naming what is wrong).
    const query = usageQuery(asked, new Date());
    // What this instance still holds behind (its last requests) is counted too, as on the API.
    await ports.dataPlane.workloads.flush();
    const rows = await usageReport({ ctx: serviceCtx(ports, session.tokenId), input: { workspaceId: session.workspaceId, ...query } });
    return { query, rows };
  };

  // Usage is the viewer's, as on the API (`functions/api/management/usage.ts`).
  app.get('/console/usage', signedIn('viewer'), async (c) => {
    const session = c.get('session');
    const { query, rows } = await read(c);
    const retention = usageRetention(portsOf(c).config.workloadRetentionDays, new Date());
    const grouping = query.groupBy.join(',');
    const params = new URLSearchParams({ from: query.from, to: query.to, groupBy: grouping });
    const body = html`<h1>Usage</h1>
<p class="lede">Inference requests and their tokens per UTC day, API token and model, as the runtimes reported them.</p>
<form method="get" action="/console/usage" class="panel row" aria-label="Usage report">
  <div><label for="usage-from">From</label><input id="usage-from" name="from" type="date" value="${query.from}"></div>
  <div><label for="usage-to">To (included)</label><input id="usage-to" name="to" type="date" value="${query.to}"></div>
  <div><label for="usage-group">Grouped by</label><select id="usage-group" name="groupBy">${GROUPINGS.map(
    (g) => html`<option value="${g.value}"${g.value === grouping ? html` selected` : nothing}>${g.label}</option>`,
  )}</select></div>
  <button type="submit">Show</button>
  <a class="btn" href="/console/usage.csv?${params.toString()}" download>Download CSV</a>
</form>
<p class="small muted">${USAGE_DEFAULT_DAYS} days up to today by default; at most ${USAGE_MAX_DAYS} days. ${query.from} to ${query.to}.
Requests are kept ${retention.retentionDays} days: all of them from ${retention.retainedFrom} on.</p>
${reportTable(rows)}`;
    return c.html(layout({ title: 'Usage', session, active: 'usage', body }).toString());
  });

  app.get('/console/usage.csv', signedIn('viewer'), async (c) => {
    const { query, rows } = await read(c);
    return c.body(toCsv(USAGE_COLUMNS, rows), 200, {
      'content-type': 'text/csv; charset=utf-8',
      'content-disposition': `attachment; filename="usage-${query.from}-${query.to}.csv"`,
    });
  });
}
