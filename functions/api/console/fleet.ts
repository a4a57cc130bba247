import type { Hono } from 'hono';
import { z } from 'zod';
import type { MachineView, RuntimeView } from '../../../shared/contracts/machine.js';
import { isId } from '../../../shared/ids.js';
import { serviceCtx, type Ports } from '../../dataplane/ports.js';
import { ApiError } from '../../kernel/errors.js';
import { clearReplicaFailures, listMachines, setMachineScheduling } from '../../services/machines.js';
import { workspaceGpuTelemetry } from '../../services/telemetry.js';
import type { MachineTelemetry } from '../../../shared/contracts/telemetry.js';
import { lineChart } from './charts.js';
import { html, nothing, type Html } from './html.js';
import { badge, csrfField, layout, notice } from './layout.js';
import { duration, mib, plural } from './format.js';
import { allows, portsOf, type ConsoleEnv, type ConsoleSession } from './session.js';
import { readForm, signedIn } from './guard.js';

/** The fleet as the console shows it: the workspace's machines from the fleet read model (the API's own view). */
export async function loadFleet(ports: Ports, session: ConsoleSession): Promise<MachineView[]> {
  return await listMachines({ ctx: serviceCtx(ports, session.tokenId), input: { workspaceId: session.workspaceId } });
}

function runtimeLine(r: RuntimeView): Html {
  const progress =
    r.progress && (r.state === 'starting' || r.state === 'pulling' || r.state === 'preparing')
      ? html` <span class="small muted">${duration(r.progress.elapsedMs)} of ${duration(r.progress.timeoutMs)}</span>`
      : nothing;
  return html`<li data-runtime="${r.deploymentName}">
    <span class="mono">${r.deploymentName || r.model || r.assignmentId}</span>
    ${badge(r.desired ? r.state : 'retiring', r.desired ? r.state : `retiring (${r.state})`)}${progress}
    <span class="small muted">${r.routable ? 'routable' : 'not routable'} · ${r.activeInvocations} active · ${r.queueDepth} queued${r.restarts > 0 ? ` · ${plural(r.restarts, 'restart')}` : ''}</span>
  </li>`;
}

/** Each GPU as the inventory names it, with what its agent sampled lately (docs/telemetry.md): live, not enrollment's. */
function gpuCell(m: MachineView): Html {
  const gpus = m.inventory.gpus;
  if (gpus.length === 0) return html`<span class="muted">none (CPU only)</span>`;
  return html`<ul class="plain">${gpus.map((g) => {
    const live = m.gpus.find((s) => s.index === g.index);
    const now = live
      ? [
          live.utilizationPercent !== null ? `${Math.round(live.utilizationPercent)}% busy` : null,
          live.memoryUsedMiB !== null ? `${mib(live.memoryUsedMiB)} used` : null,
          live.temperatureC !== null ? `${Math.round(live.temperatureC)} °C` : null,
          live.powerDrawW !== null ? `${Math.round(live.powerDrawW)} W` : null,
        ]
          .filter(Boolean)
          .join(' · ')
      : 'no recent sample';
    return html`<li data-gpu="${g.index}"><span>${g.index}: ${g.name}</span> <span class="small muted">${mib(g.memoryTotalMiB)} · <span data-live>${now}</span></span></li>`;
  })}</ul>`;
}

/** The last hour of each machine's GPUs as charts: utilisation, memory used and temperature (docs/telemetry.md). */
function gpuCharts(machines: readonly MachineView[], history: readonly MachineTelemetry[]): Html {
  const shown = machines.filter((m) => m.inventory.gpus.length > 0);
  if (shown.length === 0) return nothing;
  const chart = (m: MachineView, index: number, key: 'utilizationPercent' | 'memoryUsedMiB' | 'temperatureC', title: string, format: (v: number) => string) => {
    const series = history.find((h) => h.machineId === m.id)?.gpus.find((g) => g.index === index);
    const points = (series?.points ?? []).flatMap((p) => (p[key] === null ? [] : [{ t: Date.parse(p.at), v: p[key]! }]));
    return lineChart({
      id: `gpu-${m.id}-${index}-${key}`,
      title: `${m.name} GPU ${index}: ${title}`,
      points,
      series: key === 'temperatureC' ? 's2' : 's1',
      format,
      empty: 'no sample in the last hour',
      noun: 'minutes sampled',
    });
  };
  return html`<h2>GPUs, last hour</h2>
<p class="small muted">From the samples of each machine's heartbeats, averaged per 30 s. Reload for the newest.</p>
${shown.map(
  (m) => html`<section class="gpu-charts" data-machine="${m.name}" aria-label="${m.name} GPUs">
  <h3>${m.name}</h3>
  ${m.inventory.gpus.map(
    (g) => html`<div class="charts">
    <figure class="chart"><figcaption>GPU ${g.index} utilisation</figcaption>${chart(m, g.index, 'utilizationPercent', 'utilisation (%)', (v) => `${Math.round(v)}%`)}</figure>
    <figure class="chart"><figcaption>GPU ${g.index} memory used</figcaption>${chart(m, g.index, 'memoryUsedMiB', 'memory used', (v) => mib(v))}</figure>
    <figure class="chart"><figcaption>GPU ${g.index} temperature</figcaption>${chart(m, g.index, 'temperatureC', 'temperature (°C)', (v) => `${Math.round(v)} °C`)}</figure>
  </div>`,
  )}
</section>`,
)}`;
}

/** What replicas and run workers reserve of the machine and what is left, as placement counts them. */
function reservedCell(m: MachineView): Html {
  const { replicas, workers, free } = m.resources;
  const line = (what: string, show: (n: number) => string, key: 'gpus' | 'memoryMiB' | 'cores') =>
    html`<li>${what}: ${show(replicas[key])} replicas · ${show(workers[key])} workers · <strong>${show(free[key])} free</strong></li>`;
  return html`<ul class="plain small">${line('GPUs', String, 'gpus')}${line('memory', mib, 'memoryMiB')}${line('cores', String, 'cores')}</ul>`;
}

function actionButton(
  m: MachineView,
  verb: 'cordon' | 'drain' | 'uncordon' | 'clear-failures',
  label: string,
  session: ConsoleSession,
  confirm?: string,
): Html {
  return html`<form method="post" action="/console/machines/${m.id}/${verb}" class="inline"${confirm ? html` data-confirm="${confirm}"` : nothing}>
    ${csrfField(session)}
    <button type="submit" id="${verb}-${m.id}"${verb === 'drain' ? html` class="danger"` : nothing}>${label}<span class="vh"> ${m.name}</span></button>
  </form>`;
}

function actions(m: MachineView, session: ConsoleSession): Html {
  if (m.state === 'revoked') return html`<span class="muted small">revoked</span>`;
  const drain = actionButton(m, 'drain', 'Drain', session, `Drain ${m.name}? Its replicas move to other machines, each once its replacement serves.`);
  const buttons = m.draining
    ? [actionButton(m, 'uncordon', 'Uncordon', session)]
    : m.cordoned
      ? [drain, actionButton(m, 'uncordon', 'Uncordon', session)]
      : [actionButton(m, 'cordon', 'Cordon', session), drain];
  if (m.attention.length > 0) buttons.push(actionButton(m, 'clear-failures', 'Clear failures', session));
  return html`<div class="actions">${buttons}</div>`;
}

function machineRow(m: MachineView, session: ConsoleSession, operator: boolean): Html {
  const flags = [
    m.draining ? badge(m.drained ? 'drained' : 'draining') : m.cordoned ? badge('cordoned') : nothing,
    m.reportedStatus && m.reportedStatus !== 'ready' && m.state === 'ready'
      ? badge(m.reportedStatus === 'degraded' ? 'degraded' : 'draining', `reports ${m.reportedStatus}`)
      : nothing,
  ];
  const labels = Object.entries(m.labels)
    .map(([k, v]) => `${k}=${v}`)
    .join(', ');
  return html`<tr data-machine="${m.name}" data-state="${m.state}">
    <th scope="row"><span>${m.name}</span>${labels ? html`<br><span class="small muted">${labels}</span>` : nothing}</th>
    <td data-label="State">${badge(m.state)}${flags}<br><span class="small muted">stream ${m.streamAttached ? 'attached' : 'not attached'}</span>${
      m.attention.length > 0 ? html`<ul class="reasons small">${m.attention.map((a) => html`<li>${a.deploymentName}: ${a.reason}</li>`)}</ul>` : nothing
    }</td>
    <td data-label="Heartbeat">${m.heartbeatAgeMs === null ? html`<span class="muted">never</span>` : html`${duration(m.heartbeatAgeMs)} ago`}<br><span class="small muted">gen ${m.reportedGen ?? '–'} of ${m.desiredGen}</span></td>
    <td data-label="GPUs">${gpuCell(m)}</td>
    <td data-label="Reserved">${reservedCell(m)}</td>
    <td data-label="Memory">${mib(m.inventory.memoryAvailableMiB)} free<br><span class="small muted">of ${mib(m.inventory.memoryTotalMiB)} · ${m.inventory.cpus} CPUs · ${m.inventory.arch}</span></td>
    <td data-label="Runtimes">${m.runtimes.length === 0 ? html`<span class="muted">none</span>` : html`<ul class="plain">${m.runtimes.map(runtimeLine)}</ul>`}</td>
    <td data-label="Warm models">${m.warmModels.length === 0 ? html`<span class="muted">none</span>` : html`<span class="mono">${m.warmModels.join(', ')}</span>`}</td>
    ${operator ? html`<td data-label="Actions">${actions(m, session)}</td>` : nothing}
  </tr>`;
}

/** The live part of the fleet page (`#fleet-live`): the summary and the machine table. Also what the SSE stream sends. */
export function fleetFragment(machines: readonly MachineView[], session: ConsoleSession): Html {
  const count = (state: string) => machines.filter((m) => m.state === state).length;
  const gpus = machines.reduce((sum, m) => sum + m.inventory.gpus.length, 0);
  const serving = machines.reduce((sum, m) => sum + m.runtimes.filter((r) => r.routable).length, 0);
  const operator = allows(session, 'operator');
  if (machines.length === 0) {
    return html`<p class="panel">No machine has enrolled in this workspace yet. Create an enrollment token
      (<span class="mono">POST /api/v1/enrollment-tokens</span>) and run <span class="mono">lunanexa-agent enroll</span> on the node.</p>`;
  }
  return html`<ul class="summary" aria-label="Fleet summary">
    <li><strong>${machines.length}</strong> machines</li>
    <li><strong>${count('ready')}</strong> ready</li>
    <li><strong>${count('stale')}</strong> stale</li>
    <li><strong>${count('down')}</strong> down</li>
    <li><strong>${gpus}</strong> GPUs</li>
    <li><strong>${serving}</strong> runtimes serving</li>
  </ul>
  <div class="table-wrap">
  <table class="grid" id="machines">
    <caption>Machines, by name. Heartbeat age and state are judged with the database's clock.</caption>
    <thead><tr>
      <th scope="col">Machine</th><th scope="col">State</th><th scope="col">Heartbeat</th><th scope="col">GPUs</th>
      <th scope="col">Reserved</th><th scope="col">Memory</th><th scope="col">Runtimes</th><th scope="col">Warm models</th>${operator ? html`<th scope="col">Actions</th>` : nothing}
    </tr></thead>
    <tbody>${machines.map((m) => machineRow(m, session, operator))}</tbody>
  </table>
  </div>`;
}

const DONE: Record<string, (name: string) => string> = {
  cordon: (name) => `Cordoned ${name}: no new replica is placed there; its replicas keep serving.`,
  drain: (name) => `Draining ${name}: each replica moves once its replacement serves elsewhere.`,
  uncordon: (name) => `Uncordoned ${name}: replicas may be placed there again.`,
  'clear-failures': (name) => `Cleared the replica failures of ${name}.`,
};

const MachineAction = z.object({ _csrf: z.string() });
const VERBS = ['cordon', 'drain', 'uncordon', 'clear-failures'] as const;

/** `GET /` (the fleet) and `POST /console/machines/{id}/{cordon|drain|uncordon|clear-failures}`. */
export function registerFleet(app: Hono<ConsoleEnv>): void {
  app.get('/', signedIn('viewer'), async (c) => {
    const session = c.get('session');
    const ports = portsOf(c);
    const machines = await loadFleet(ports, session);
    const history = await workspaceGpuTelemetry({
      ctx: serviceCtx(ports, session.tokenId),
      input: { workspaceId: session.workspaceId, query: { minutes: 60, points: 120 } },
    });
    const done = DONE[c.req.query('done') ?? ''];
    const target = machines.find((m) => m.id === c.req.query('machine'));
    const body = html`<h1>Fleet</h1>
<p class="lede">Machines, their GPUs, heartbeats, runtimes and warm models, live.</p>
${done && target ? notice(done(target.name)) : nothing}
<div id="fleet-live">${fleetFragment(machines, session)}</div>
${gpuCharts(machines, history)}`;
    return c.html(layout({ title: 'Fleet', session, active: 'fleet', live: 'fleet', body }).toString());
  });

  for (const verb of VERBS) {
    // The management API's rule for the same verbs: operator (`functions/api/management/machines.ts`).
    app.post(`/console/machines/:id/${verb}`, signedIn('operator'), async (c) => {
      const session = c.get('session');
      await readForm(c, MachineAction, session);
      const machineId = c.req.param('id');
      if (!isId('machine', machineId)) throw new ApiError('not_found', `there is no machine ${machineId}`);
      const ports = portsOf(c);
      const ctx = serviceCtx(ports, session.tokenId);
      const input = { workspaceId: session.workspaceId, machineId };
      if (verb === 'clear-failures') await clearReplicaFailures({ ctx, input });
      else await setMachineScheduling({ ctx, input: { ...input, verb } });
      return c.redirect(`/?done=${verb}&machine=${encodeURIComponent(machineId)}`, 303);
    });
  }
}
