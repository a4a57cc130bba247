import type { Hono } from 'hono';
import type { JobView } from '../../../shared/batch/job.js';
import { isId } from '../../../shared/ids.js';
import type { RowPage } from '../../core/paging.js';
import { serviceCtx } from '../../dataplane/ports.js';
import { ApiError } from '../../kernel/errors.js';
import { listJobs } from '../../services/jobs.js';
import { html, nothing, type Html } from './html.js';
import { badge, layout, when } from './layout.js';
import { duration, num } from './format.js';
import { portsOf, type ConsoleEnv } from './session.js';
import { signedIn } from './guard.js';

/** Jobs a page shows: a workspace may have thousands; the list pages by id, as the API does. */
const PAGE = 50;

/** Rows done of the total, and while it runs its rate and time left. */
function progressCell(j: JobView): Html {
  const done = j.rows.succeeded + j.rows.failed;
  const running = j.state === 'running' || j.state === 'cancelling';
  return html`${num(done)}${j.rows.total === null ? nothing : html` of ${num(j.rows.total)}`} rows${
    j.rows.failed > 0 ? html`<br><span class="small muted">${num(j.rows.failed)} failed</span>` : nothing
  }${
    running && j.rate !== null
      ? html`<br><span class="small muted">${num(j.rate, 1)} rows/s${j.etaMs === null ? nothing : html`, ${duration(j.etaMs)} left`}</span>`
      : nothing
  }`;
}

function what(j: JobView): Html {
  const spec = j.spec;
  if (spec.kind === 'rows') return html`${spec.rows.kind} on <span class="mono">${spec.rows.model}</span> (${spec.format})`;
  if (spec.kind === 'command') return html`command <span class="mono">${spec.command.template}</span> on a node`;
  return html`batch to <span class="mono">${spec.endpoint}</span>`;
}

function jobRow(j: JobView): Html {
  return html`<tr data-job="${j.id}" data-state="${j.state}">
    <th scope="row"><span class="mono">${j.id}</span></th>
    <td data-label="What">${what(j)}</td>
    <td data-label="State">${badge(j.state)}${j.reason && j.state !== 'completed' ? html`<br><span class="small muted">${j.reason}</span>` : nothing}</td>
    <td data-label="Progress" class="num">${progressCell(j)}</td>
    <td data-label="Created">${when(j.createdAt)}</td>
    <td data-label="Output"><span class="mono">${j.outputFileId ?? '–'}</span>${
      j.errorFileId ? html`<br><span class="small muted">errors <span class="mono">${j.errorFileId}</span></span>` : nothing
    }</td>
  </tr>`;
}

/** The jobs table: what each does, its state, its progress (rate and time left while it runs) and its output files. */
export function jobsFragment(page: RowPage<JobView>): Html {
  if (page.items.length === 0) {
    return html`<p class="panel">No job yet. Submit one with <span class="mono">lunanexa jobs submit -f FILE</span>, or a batch with any
      OpenAI SDK (<span class="mono">POST /v1/batches</span>, docs/jobs.md).</p>`;
  }
  const last = page.items.at(-1);
  return html`<div class="table-wrap">
  <table class="grid" id="jobs">
    <caption>Jobs and batches, newest first: rows done of the total, the rate and time left while one runs, its output files (the Files API's).</caption>
    <thead><tr>
      <th scope="col">Job</th><th scope="col">What</th><th scope="col">State</th><th scope="col" class="num">Progress</th>
      <th scope="col">Created</th><th scope="col">Output</th>
    </tr></thead>
    <tbody>${page.items.map(jobRow)}</tbody>
  </table>
  </div>
  ${page.more && last ? html`<p><a href="/console/jobs?after=${last.id}">Older jobs</a></p>` : nothing}`;
}

/** `GET /console/jobs`: the workspace's jobs, a page at a time. */
export function registerJobs(app: Hono<ConsoleEnv>): void {
  app.get('/console/jobs', signedIn('viewer'), async (c) => {
    const session = c.get('session');
    const after = c.req.query('after');
    if (after !== undefined && !isId('job', after)) throw new ApiError('validation_failed', 'after must be a job id (job_...)');
    const page = await listJobs({ ctx: serviceCtx(portsOf(c), session.tokenId), input: { workspaceId: session.workspaceId, after, limit: PAGE } });
    const body = html`<h1>Jobs</h1>
<p class="lede">Work against the fleet's models: built-in row jobs and OpenAI batches, checkpointed row by row. Reload to refresh.</p>
${after ? html`<p><a href="/console/jobs">Newest jobs</a></p>` : nothing}
${jobsFragment(page)}`;
    return c.html(layout({ title: 'Jobs', session, active: 'jobs', body }).toString());
  });
}
