import type { Hono } from 'hono';
import { z } from 'zod';
import { DeploymentName, type DeploymentDetail } from '../../../shared/contracts/deployment.js';
import { serviceCtx, type Ports } from '../../dataplane/ports.js';
import { ApiError } from '../../kernel/errors.js';
import { describeDeployments, scaleDeployment } from '../../services/deployments.js';
import { machineNames } from '../../services/machines.js';
import { html, nothing, type Html } from './html.js';
import { badge, csrfField, layout, notice, when } from './layout.js';
import { millis, num, plural } from './format.js';
import { lineChart } from './charts.js';
import { deploymentTelemetry } from '../../services/telemetry.js';
import type { DeploymentTelemetry } from '../../../shared/contracts/telemetry.js';
import { allows, portsOf, type ConsoleEnv, type ConsoleSession } from './session.js';
import { readForm, signedIn } from './guard.js';

/** Deployments shown on the page (by name); past it the page says how to see the rest (the API pages them). */
const SHOWN = 100;
/** Deployments whose last hour is charted below the cards: each costs the page one read of its requests (samples are read once). */
const CHARTED = 10;
const EVENTS_SHOWN = 20;

export interface DeploymentsData {
  items: DeploymentDetail[];
  more: boolean;
  /** Machine names by id, for events (which name machines by id, some no longer in the fleet read model). */
  machineNames: Map<string, string>;
}

/** Every live deployment of the workspace with its status and events, from one read of the fleet (the API's contract). */
export async function loadDeployments(ports: Ports, session: ConsoleSession): Promise<DeploymentsData> {
  const ctx = serviceCtx(ports, session.tokenId);
  const page = await describeDeployments({ ctx, input: { workspaceId: session.workspaceId, limit: SHOWN, eventsPerDeployment: EVENTS_SHOWN } });
  return { ...page, machineNames: await machineNames({ ctx, input: { workspaceId: session.workspaceId } }) };
}

function runtimeText(d: DeploymentDetail): string {
  return d.runtime.kind === 'simulated' ? 'simulated runtime' : `template ${d.runtime.template}`;
}

function scaleForm(d: DeploymentDetail, session: ConsoleSession): Html {
  return html`<form method="post" action="/console/deployments/${d.name}/scale" class="row">
    ${csrfField(session)}
    <input type="hidden" name="generation" value="${d.generation}">
    <div><label for="replicas-${d.name}">Replicas</label>
    <input id="replicas-${d.name}" name="replicas" type="number" min="0" max="1024" step="1" required value="${d.replicas}" inputmode="numeric"></div>
    <button type="submit" id="scale-${d.name}">Scale<span class="vh"> ${d.name}</span></button>
  </form>`;
}

/** An autoscaled deployment's policy and the autoscaler's latest decision, in place of the scale form. */
function autoscaleText(d: DeploymentDetail): Html {
  const { minReplicas, maxReplicas, target } = d.autoscale!;
  const last = d.status.autoscaler;
  return html`<p data-autoscale>Autoscaled between ${minReplicas} and ${maxReplicas} replicas on <span class="mono">${target.metric}</span> ${target.value}${
    last
      ? html`<br><span class="small muted">${last.action === 'hold' ? `holds ${last.to}` : `${last.action === 'up' ? 'scaled up' : 'scaled down'} from ${last.from} to ${last.to}`}: ${last.reason}</span>`
      : nothing
  }</p>`;
}

/** What a deployment serves, when it names a registry version: ` · serving alias chat-default`. */
const sourceText = (d: DeploymentDetail) =>
  d.source ? ` · serving ${d.source.kind === 'alias' ? `alias ${d.source.alias}` : `${d.source.model} ${d.source.version}`}` : '';

function deploymentCard(d: DeploymentDetail, data: DeploymentsData, session: ConsoleSession): Html {
  const s = d.status;
  const updatedServing = s.replicas.filter((r) => r.desired && r.current && r.routable).length;
  const title = `dep-${d.id}`;
  const machineName = (id: string | null) => (id ? (data.machineNames.get(id) ?? id) : null);
  const events = [...d.events].reverse();
  return html`<section class="card" aria-labelledby="${title}" data-deployment="${d.name}">
  <h2 id="${title}">${d.name}</h2>
  <p class="small muted">model <span class="mono">${d.model}</span> · ${runtimeText(d)} · generation ${d.generation} ·
    ${d.gpus} GPU${d.gpus === 1 ? '' : 's'}, ${d.memoryMiB} MiB per replica${sourceText(d)}</p>
  ${s.asleep ? html`<p>${badge('asleep', 'scaled to zero')} <span class="small muted">the next request wakes it</span></p>` : nothing}
  ${
    s.canary
      ? html`<p data-canary>Canary <span class="mono">${s.canary.version}</span> takes ${d.canary?.weight ?? 0} % of requests: ${s.canary.ready} of ${s.canary.desired} ready, ${s.canary.starting} starting</p>`
      : nothing
  }
  <ul class="counts" aria-label="Replicas of ${d.name}">
    <li><strong data-ready>${s.ready}</strong> of ${s.desired} ready</li>
    <li>${s.starting} starting</li>
    <li>${s.failed} failed</li>
    <li>${s.unplaceable} unplaceable</li>
  </ul>
  <p>Rollout ${badge(s.rollout.state)}
    <progress max="${Math.max(1, s.desired)}" value="${Math.min(updatedServing, Math.max(1, s.desired))}" aria-label="Rollout of ${d.name}: ${updatedServing} of ${s.desired} replicas updated and serving">${updatedServing} of ${s.desired}</progress>
    <span class="small muted">${s.rollout.updated} updated · ${s.rollout.outdated} outdated · ${s.rollout.retiring} retiring</span></p>
  ${s.degraded ? html`<p>${badge('degraded')}</p><ul class="reasons">${s.degradedReasons.map((r) => html`<li>${r}</li>`)}</ul>` : nothing}
  ${
    s.unplaceable > 0
      ? html`<details open><summary>Why ${plural(s.unplaceable, 'replica')} cannot be placed</summary>
      <ul class="reasons">${s.unplaceableReasons.length === 0 ? html`<li>no machine in this workspace</li>` : s.unplaceableReasons.map((r) => html`<li><strong>${r.machineName}</strong>: ${r.reason}</li>`)}</ul></details>`
      : nothing
  }
  ${
    s.replicas.length === 0
      ? html`<p class="muted">No replica.</p>`
      : html`<div class="table-wrap"><table class="grid">
    <caption class="vh">Replicas of ${d.name}</caption>
    <thead><tr><th scope="col">Machine</th><th scope="col">State</th><th scope="col">Set</th><th scope="col">Template</th><th scope="col">Routable</th><th scope="col" class="num">Restarts</th></tr></thead>
    <tbody>${s.replicas.map(
      (r) => html`<tr data-replica-machine="${r.machineName}" data-desired="${String(r.desired)}">
      <th scope="row">${r.machineName}</th>
      <td data-label="State">${badge(r.desired ? r.state : 'retiring', r.desired ? r.state : `retiring (${r.state})`)}${r.message ? html`<br><span class="small muted">${r.message}</span>` : nothing}</td>
      <td data-label="Set">${r.track}</td>
      <td data-label="Template">${r.current ? 'current' : 'outdated'}</td>
      <td data-label="Routable">${r.routable ? 'yes' : 'no'}</td>
      <td data-label="Restarts" class="num">${r.restarts}</td>
    </tr>`,
    )}</tbody></table></div>`
  }
  ${d.autoscale ? autoscaleText(d) : allows(session, 'operator') ? scaleForm(d, session) : nothing}
  <details><summary>Events (${events.length === 0 ? 'none yet' : `newest ${events.length}`})</summary>
    <ol class="events">${events.map(
      (e) =>
        html`<li>${when(e.at)} <strong>${e.type}</strong>${machineName(e.machineId) ? html` on ${machineName(e.machineId)}` : nothing}${e.message ? html`: ${e.message}` : nothing}</li>`,
    )}</ol>
  </details>
</section>`;
}

/** The live part of the deployments page (`#deployments-live`): one card per deployment. Also what the SSE stream sends. */
export function deploymentsFragment(data: DeploymentsData, session: ConsoleSession): Html {
  if (data.items.length === 0) {
    return html`<p class="panel">No deployment yet. Declare one with <span class="mono">PUT /api/v1/deployments/{name}</span> (docs/operations.md).</p>`;
  }
  return html`<div class="cards">${data.items.map((d) => deploymentCard(d, data, session))}</div>
  ${data.more ? html`<p class="muted">The first ${SHOWN} deployments by name are shown; <span class="mono">GET /api/v1/deployments</span> lists them all.</p>` : nothing}`;
}

/**
 * The last hour of the first deployments as charts (docs/telemetry.md): what waits on their replicas, their TTFT p95
 * and their tokens per second, per minute; drawn on the server when the page loads.
 */
function deploymentCharts(series: readonly DeploymentTelemetry[]): Html {
  if (series.length === 0) return nothing;
  const chart = (t: DeploymentTelemetry, key: 'queueDepth' | 'ttftP95Ms' | 'tokensPerSecond', title: string, format: (v: number) => string) => {
    const points = t.points.flatMap((p) => (p[key] === null ? [] : [{ t: Date.parse(p.at), v: p[key]! }]));
    return html`<figure class="chart"><figcaption>${title}</figcaption>${lineChart({
      id: `deployment-${t.deployment}-${key}`,
      title: `${t.deployment}: ${title}`,
      points,
      series: key === 'tokensPerSecond' ? 's2' : 's1',
      format,
      empty: 'nothing in the last hour',
      noun: 'minutes',
    })}</figure>`;
  };
  return html`<h2>Last hour</h2>
<p class="small muted">Per minute: the queue on each deployment's replicas (at their agents and in their engines, from the nodes' samples), and its requests' TTFT p95 and tokens per second. Reload for the newest.</p>
${series.map(
  (t) => html`<section class="deployment-charts" data-deployment="${t.deployment}" aria-label="${t.deployment} over the last hour">
  <h3>${t.deployment}</h3>
  <div class="charts">
    ${chart(t, 'queueDepth', 'Queue', (v) => num(v, v < 10 ? 1 : 0))}
    ${chart(t, 'ttftP95Ms', 'TTFT p95', millis)}
    ${chart(t, 'tokensPerSecond', 'Tokens per second', (v) => num(v, v < 10 ? 1 : 0))}
  </div>
</section>`,
)}`;
}

const ScaleForm = z.object({
  _csrf: z.string(),
  replicas: z
    .string()
    .trim()
    .regex(/^\d{1,4}$/, 'Replicas must be a whole number from 0 to 1024.')
    .transform(Number)
    .pipe(z.number().max(1024, 'Replicas must be a whole number from 0 to 1024.')),
  generation: z
    .string()
    .regex(/^\d{1,9}$/, 'The form lost its generation field; reload the page.')
    .transform(Number),
});

/** `GET /console/deployments` and `POST /console/deployments/{name}/scale`. */
export function registerDeployments(app: Hono<ConsoleEnv>): void {
  app.get('/console/deployments', signedIn('viewer'), async (c) => {
    const session = c.get('session');
    const ports = portsOf(c);
    const data = await loadDeployments(ports, session);
    const series = await deploymentTelemetry({
      ctx: serviceCtx(ports, session.tokenId),
      input: { workspaceId: session.workspaceId, names: data.items.slice(0, CHARTED).map((d) => d.name), query: { minutes: 60, points: 60 } },
    });
    const scaled = c.req.query('done') === 'scale' ? data.items.find((d) => d.name === c.req.query('deployment')) : undefined;
    const body = html`<h1>Deployments</h1>
<p class="lede">Replicas, rollout progress, why a replica cannot be placed, and what happened, live.</p>
${scaled ? notice(`Scaled ${scaled.name} to ${plural(scaled.replicas, 'replica')}.`) : nothing}
<div id="deployments-live">${deploymentsFragment(data, session)}</div>
${deploymentCharts(series)}`;
    return c.html(layout({ title: 'Deployments', session, active: 'deployments', live: 'deployments', body }).toString());
  });

  // The management API's rule for changing a deployment: operator (`functions/api/management/deployments.ts`).
  app.post('/console/deployments/:name/scale', signedIn('operator'), async (c) => {
    const session = c.get('session');
    const form = await readForm(c, ScaleForm, session);
    const name = DeploymentName.safeParse(c.req.param('name'));
    if (!name.success) throw new ApiError('not_found', `there is no deployment ${c.req.param('name')}`);
    const ports = portsOf(c);
    const ctx = serviceCtx(ports, session.tokenId);
    await scaleDeployment({ ctx, input: { workspaceId: session.workspaceId, name: name.data, replicas: form.replicas, generation: form.generation } });
    await ports.dataPlane.routing.refreshed();
    return c.redirect(`/console/deployments?done=scale&deployment=${encodeURIComponent(name.data)}`, 303);
  });
}
