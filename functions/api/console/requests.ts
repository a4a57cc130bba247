import type { Hono } from 'hono';
import { serviceCtx, type Ports } from '../../dataplane/ports.js';
import { recentRequests, type RecentRequest } from '../../services/workloads.js';
import { html, nothing, type Html } from './html.js';
import { badge, layout, when } from './layout.js';
import { lineChart, type ChartPoint } from './charts.js';
import { millis, num, quantile } from './format.js';
import { portsOf, type ConsoleEnv, type ConsoleSession } from './session.js';
import { signedIn } from './guard.js';

/** The window and the number of requests the page reads: recent enough to be live, bounded whatever the rate. */
const WINDOW_MINUTES = 15;
const READ = 300;
const LISTED = 25;

export type { RecentRequest };

/** The newest requests of the workspace in the last `WINDOW_MINUTES`, newest first (at most `READ`). */
export async function loadRecentRequests(ports: Ports, session: ConsoleSession): Promise<RecentRequest[]> {
  return await recentRequests({
    ctx: serviceCtx(ports, session.tokenId),
    input: { workspaceId: session.workspaceId, windowMinutes: WINDOW_MINUTES, limit: READ },
  });
}

/**
 * Output tokens per second of a finished request: over the time after its first byte when that was measured and
 * long enough (a streamed answer), else over the whole request (an answer sent in one piece has no decode phase
 * to time apart). Null when the tokens or the end are unknown.
 */
export function tokensPerSecond(r: Pick<RecentRequest, 'createdAt' | 'finishedAt' | 'firstByteMs' | 'completionTokens'>): number | null {
  if (!r.finishedAt || !r.completionTokens || r.completionTokens <= 0) return null;
  const total = r.finishedAt.getTime() - r.createdAt.getTime();
  const decode = r.firstByteMs !== null ? total - r.firstByteMs : 0;
  const seconds = (decode >= 5 ? decode : total) / 1000;
  return seconds > 0 ? r.completionTokens / seconds : null;
}

function outcome(r: RecentRequest): Html {
  const state = r.state === 'succeeded' ? 'ready' : r.state === 'failed' ? 'failed' : r.state === 'cancelled' ? 'stopped' : 'starting';
  const code = r.errorCode ?? (r.statusCode !== null && r.statusCode !== 200 ? String(r.statusCode) : null);
  return html`${badge(state, r.state)}${code ? html` <span class="small muted mono">${code}</span>` : nothing}`;
}

/** The live part of the requests page (`#requests-live`): TTFT and tokens/s charts, then the newest requests. */
export function requestsFragment(requests: readonly RecentRequest[]): Html {
  const ttft: ChartPoint[] = requests.flatMap((r) => (r.firstByteMs !== null ? [{ t: r.createdAt.getTime(), v: r.firstByteMs }] : []));
  const speed: ChartPoint[] = requests.flatMap((r) => {
    const v = tokensPerSecond(r);
    return v === null ? [] : [{ t: r.createdAt.getTime(), v }];
  });
  const finished = requests.filter((r) => r.state === 'succeeded' || r.state === 'failed' || r.state === 'cancelled');
  const ok = finished.filter((r) => r.state === 'succeeded').length;
  const empty = requests.length === 0 ? 'no requests yet' : 'not measured for these requests';
  const ttftValues = ttft.map((p) => p.v);
  return html`<ul class="summary" aria-label="Requests in the last ${WINDOW_MINUTES} minutes">
    <li><strong>${requests.length}${requests.length === READ ? '+' : ''}</strong> requests (${WINDOW_MINUTES} min)</li>
    <li><strong>${finished.length === 0 ? '–' : `${Math.round((ok / finished.length) * 100)}%`}</strong> succeeded</li>
    <li><strong>${millis(quantile(ttftValues, 0.5))}</strong> TTFT median</li>
    <li><strong>${millis(quantile(ttftValues, 0.95))}</strong> TTFT p95</li>
    <li><strong>${num(
      quantile(
        speed.map((p) => p.v),
        0.5,
      ),
      1,
    )}</strong> tokens/s median</li>
  </ul>
  <div class="charts">
    <figure class="chart"><figcaption>Time to first token</figcaption>
      ${lineChart({ id: 'chart-ttft', title: 'Time to first token per request', points: ttft, series: 's1', format: millis, empty })}
    </figure>
    <figure class="chart"><figcaption>Output tokens per second</figcaption>
      ${lineChart({ id: 'chart-tps', title: 'Output tokens per second per request', points: speed, series: 's2', format: (v) => num(v, v < 10 ? 1 : 0), empty })}
    </figure>
  </div>
  <h2>Newest requests</h2>
  ${
    requests.length === 0
      ? html`<p class="panel" id="no-requests">No requests yet in the last ${WINDOW_MINUTES} minutes. Send one to
        <span class="mono">POST /v1/chat/completions</span> with an inference (or any) token and it shows here.</p>`
      : html`<div class="table-wrap"><table class="grid" id="requests-table">
    <caption class="vh">The ${Math.min(LISTED, requests.length)} newest requests</caption>
    <thead><tr><th scope="col">Started</th><th scope="col">Model</th><th scope="col">Machine</th><th scope="col">Outcome</th>
      <th scope="col" class="num">TTFT</th><th scope="col" class="num">Tokens in / out</th><th scope="col" class="num">Tokens/s</th><th scope="col" class="num">Duration</th></tr></thead>
    <tbody>${requests.slice(0, LISTED).map(
      (r) => html`<tr>
      <th scope="row">${when(r.createdAt)}</th>
      <td data-label="Model" class="mono">${r.model ?? r.deploymentName ?? '–'}</td>
      <td data-label="Machine">${r.machineName ?? '–'}</td>
      <td data-label="Outcome">${outcome(r)}</td>
      <td data-label="TTFT" class="num">${millis(r.firstByteMs)}</td>
      <td data-label="Tokens in / out" class="num">${num(r.promptTokens)} / ${num(r.completionTokens)}</td>
      <td data-label="Tokens/s" class="num">${num(tokensPerSecond(r), 1)}</td>
      <td data-label="Duration" class="num">${r.finishedAt ? millis(r.finishedAt.getTime() - r.createdAt.getTime()) : '–'}</td>
    </tr>`,
    )}</tbody></table></div>`
  }`;
}

/** `GET /console/requests`. */
export function registerRequests(app: Hono<ConsoleEnv>): void {
  app.get('/console/requests', signedIn('viewer'), async (c) => {
    const session = c.get('session');
    const requests = await loadRecentRequests(portsOf(c), session);
    const body = html`<h1>Requests</h1>
<p class="lede">Inference requests of the last ${WINDOW_MINUTES} minutes: time to first token and output speed, live.</p>
<div id="requests-live">${requestsFragment(requests)}</div>`;
    return c.html(layout({ title: 'Requests', session, active: 'requests', live: 'requests', body }).toString());
  });
}
