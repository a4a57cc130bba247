import type { Hono } from 'hono';
import { z } from 'zod';
import type { RunDetail, RunQueueStanding, RunView } from '../../../shared/contracts/run-view.js';
import { isId } from '../../../shared/ids.js';
import type { RowPage } from '../../core/paging.js';
import { serviceCtx, type Ports } from '../../dataplane/ports.js';
import { ApiError } from '../../kernel/errors.js';
import { cancelRun, listRuns, showRun } from '../../services/runs.js';
import { queueStanding } from '../../services/run-queue.js';
import { html, nothing, type Html } from './html.js';
import { badge, csrfField, layout, notice, when } from './layout.js';
import { plural } from './format.js';
import { allows, portsOf, type ConsoleEnv, type ConsoleSession } from './session.js';
import { readForm, signedIn } from './guard.js';

/** Runs on a page, newest first; older ones are a link away (keyset, as the API pages them). */
const PAGE = 50;
/** A run's last events on its page; the API and `lunanexa runs show --json` give them all. */
const EVENTS_SHOWN = 20;
/** Workers listed on a run's page: a run may have 4,096, which no one reads as a table. */
const WORKERS_SHOWN = 256;
/** A run in one of these has ended: nothing is left to cancel. */
const ENDED = new Set(['completed', 'failed']);

/** What the runs page shows: a page of the workspace's runs, and where the workspace stands in the queue. */
export interface RunsData {
  page: RowPage<RunView>;
  standing: RunQueueStanding;
}

/** A page of the workspace's runs, newest first, after `after` (a run id) when given, and its queue standing. */
export async function loadRuns(ports: Ports, session: ConsoleSession, after?: string): Promise<RunsData> {
  const ctx = serviceCtx(ports, session.tokenId);
  const page = await listRuns({ ctx, input: { workspaceId: session.workspaceId, newestFirst: true, after, limit: PAGE } });
  return { page, standing: await queueStanding({ ctx, input: { workspaceId: session.workspaceId } }) };
}

/** The workspace's fair share as the queue reads it, and its rank while its runs wait. */
function standingItem(s: RunQueueStanding): Html {
  const hours = Math.round(s.windowMs / 3_600_000);
  const rank = s.rank === null ? nothing : html`; <strong>${s.rank}</strong> of ${s.competing} workspaces waiting`;
  return html`<li data-standing>fair share: <strong>${s.gpuSeconds.toLocaleString('en-US')}</strong> GPU-seconds in ${hours} h at weight ${s.weight}${rank}</li>`;
}

/** A run's state, and while it waits its place in the queue. */
function stateCell(r: RunView): Html {
  return html`${badge(r.state)}${r.position !== null ? html`<br><span class="small muted">queue position ${r.position}</span>` : nothing}${
    r.restarts > 0 ? html`<br><span class="small muted">${plural(r.restarts, 'restart')}</span>` : nothing
  }`;
}

const workersText = (r: RunView) => `${r.workersDone} of ${r.workerCount} done`;

function runRow(r: RunView): Html {
  return html`<tr data-run="${r.name}" data-state="${r.state}">
    <th scope="row"><a href="/console/runs/${r.id}">${r.name}</a><br><span class="small muted mono">${r.id}</span></th>
    <td data-label="State">${stateCell(r)}</td>
    <td data-label="Workers" class="num">${workersText(r)}</td>
    <td data-label="Priority" class="num">${r.priority}</td>
    <td data-label="Submitted">${when(r.submittedAt)}</td>
    <td data-label="Reason" class="wrap" data-reason>${r.reason ?? html`<span class="muted">–</span>`}</td>
  </tr>`;
}

/**
 * The live part of the runs page (`#runs-live`): the runs table and the link to older runs. Also what the SSE
 * stream sends, for the first page (a later page is a snapshot, as the rows under it do not move).
 */
export function runsFragment({ page, standing }: RunsData): Html {
  if (page.items.length === 0) {
    return html`<p class="panel">No run yet. Submit one with <span class="mono">lunanexa runs submit -f FILE</span> or
      <span class="mono">POST /api/v1/runs</span> (docs/runs.md).</p>`;
  }
  const waiting = page.items.filter((r) => r.position !== null).length;
  const last = page.items.at(-1);
  return html`<ul class="summary" aria-label="Runs on this page">
    <li><strong>${page.items.length}</strong> runs</li>
    <li><strong>${waiting}</strong> waiting in the queue</li>
    <li><strong>${page.items.filter((r) => ENDED.has(r.state)).length}</strong> ended</li>
    ${standingItem(standing)}
  </ul>
  <div class="table-wrap">
  <table class="grid" id="runs">
    <caption>Runs, newest first. A waiting run shows its place in the workspace's queue and why it waits; an ended one why it ended.</caption>
    <thead><tr>
      <th scope="col">Run</th><th scope="col">State</th><th scope="col" class="num">Workers</th><th scope="col" class="num">Priority</th>
      <th scope="col">Submitted</th><th scope="col">Reason</th>
    </tr></thead>
    <tbody>${page.items.map(runRow)}</tbody>
  </table>
  </div>
  ${page.more && last ? html`<p><a href="/console/runs?after=${last.id}">Older runs</a></p>` : nothing}`;
}

function cancelForm(run: RunDetail, session: ConsoleSession): Html {
  return html`<form method="post" action="/console/runs/${run.id}/cancel" class="inline" data-confirm="Cancel ${run.name}? Its workers are stopped and it fails (cancelled).">
    ${csrfField(session)}
    <button type="submit" id="cancel-run" class="danger">Cancel<span class="vh"> ${run.name}</span></button>
  </form>`;
}

/** A run's page: where it stands, its workers and its last events, newest first; an operator's Cancel while it is live. */
export function runDetailBody(run: RunDetail, session: ConsoleSession): Html {
  const workerName = new Map(run.workers.map((w) => [w.id, w.name]));
  const events = run.events.slice(-EVENTS_SHOWN).reverse();
  const workers = run.workers.slice(0, WORKERS_SHOWN);
  const spec = run.spec;
  return html`<section class="panel" aria-label="Run ${run.name}" data-run="${run.name}" data-state="${run.state}">
    <p>${badge(run.state)}${run.position !== null ? html` queue position <strong>${run.position}</strong>` : nothing}</p>
    ${run.reason ? html`<p data-reason>${run.reason}</p>` : nothing}
    <p class="small muted">template <span class="mono">${spec.template}</span> · priority ${run.priority} · ${workersText(run)}${spec.gang ? ' · gang' : ''} ·
      on failure ${spec.failurePolicy.action} · ${plural(run.restarts, 'restart')}</p>
    <p class="small muted">submitted ${when(run.submittedAt)} · started ${when(run.startedAt)} · finished ${when(run.finishedAt)}</p>
    ${allows(session, 'operator') && !ENDED.has(run.state) ? cancelForm(run, session) : nothing}
  </section>
  <h2>Workers</h2>
  <div class="table-wrap"><table class="grid" id="run-workers">
    <caption class="vh">Workers of ${run.name}, by rank</caption>
    <thead><tr><th scope="col" class="num">Rank</th><th scope="col">Worker</th><th scope="col">Machine</th><th scope="col">State</th>
      <th scope="col" class="num">Attempt</th><th scope="col" class="num">Exit code</th><th scope="col">Message</th></tr></thead>
    <tbody>${workers.map(
      (w) => html`<tr data-worker="${w.name}" data-state="${w.state}">
      <td data-label="Rank" class="num">${w.rank}</td>
      <th scope="row">${w.name}</th>
      <td data-label="Machine">${w.machineId ? (w.machineName ?? html`<span class="mono">${w.machineId}</span>`) : html`<span class="muted">not placed</span>`}</td>
      <td data-label="State">${badge(w.state)}</td>
      <td data-label="Attempt" class="num">${w.attempt}</td>
      <td data-label="Exit code" class="num">${w.exitCode ?? '–'}</td>
      <td data-label="Message" class="wrap">${w.message ?? html`<span class="muted">–</span>`}</td>
    </tr>`,
    )}</tbody></table></div>
  ${run.workers.length > workers.length ? html`<p class="muted">The first ${WORKERS_SHOWN} of ${run.workers.length} workers are shown; <span class="mono">GET /api/v1/runs/${run.id}</span> lists them all.</p>` : nothing}
  <h2>Events</h2>
  ${
    events.length === 0
      ? html`<p class="panel">No event yet.</p>`
      : html`<div class="table-wrap"><table class="grid" id="run-events">
    <caption class="vh">The last ${events.length} events of ${run.name}, newest first</caption>
    <thead><tr><th scope="col">When</th><th scope="col">Subject</th><th scope="col">From</th><th scope="col">To</th><th scope="col">Reason</th><th scope="col">By</th></tr></thead>
    <tbody>${events.map(
      (e) => html`<tr>
      <th scope="row">${when(e.at)}</th>
      <td data-label="Subject">${e.workerId ? (workerName.get(e.workerId) ?? e.workerId) : 'run'}</td>
      <td data-label="From">${e.from}</td>
      <td data-label="To">${badge(e.to)}</td>
      <td data-label="Reason" class="wrap">${e.reason}</td>
      <td data-label="By">${e.origin}</td>
    </tr>`,
    )}</tbody></table></div>`
  }`;
}

/** Cancelling carries nothing but the CSRF token: the run is the path's. */
const CancelForm = z.object({ _csrf: z.string() });

/** The run id of a path, or 404 as for a run of another workspace. */
function runIdOf(id: string): string {
  if (!isId('run', id)) throw new ApiError('not_found', `there is no run ${id}`);
  return id;
}

/** `GET /console/runs`, `GET /console/runs/{id}` and `POST /console/runs/{id}/cancel`. */
export function registerRuns(app: Hono<ConsoleEnv>): void {
  app.get('/console/runs', signedIn('viewer'), async (c) => {
    const session = c.get('session');
    const after = c.req.query('after');
    if (after !== undefined && !isId('run', after)) throw new ApiError('validation_failed', 'after must be a run id (run_...)');
    const data = await loadRuns(portsOf(c), session, after);
    const body = html`<h1>Runs</h1>
<p class="lede">Batch jobs on the fleet: the queue, each run's workers and why a run waits${after ? '' : ', live'}.</p>
${after ? html`<p><a href="/console/runs">Newest runs</a></p>` : nothing}
<div id="runs-live">${runsFragment(data)}</div>`;
    // Only the first page is live: the stream renders the newest runs, which a later page does not show.
    return c.html(layout({ title: 'Runs', session, active: 'runs', live: after ? undefined : 'runs', body }).toString());
  });

  app.get('/console/runs/:id', signedIn('viewer'), async (c) => {
    const session = c.get('session');
    const ctx = serviceCtx(portsOf(c), session.tokenId);
    const run = await showRun({ ctx, input: { workspaceId: session.workspaceId, id: runIdOf(c.req.param('id')) } });
    const body = html`<p><a href="/console/runs">Runs</a></p>
<h1>Run ${run.name}</h1>
${c.req.query('done') === 'cancel' ? notice(`Cancelled ${run.name}: its machines stop its workers.`) : nothing}
${runDetailBody(run, session)}`;
    return c.html(layout({ title: `Run ${run.name}`, session, active: 'runs', body }).toString());
  });

  // The management API's rule for cancelling a run: operator (`functions/api/management/runs.ts`).
  app.post('/console/runs/:id/cancel', signedIn('operator'), async (c) => {
    const session = c.get('session');
    await readForm(c, CancelForm, session);
    const id = runIdOf(c.req.param('id'));
    await cancelRun({ ctx: serviceCtx(portsOf(c), session.tokenId), input: { workspaceId: session.workspaceId, id } });
    return c.redirect(`/console/runs/${id}?done=cancel`, 303);
  });
}
