import type { Command } from 'commander';
import { z } from 'zod';
import { DeploymentDetail, DeploymentListItem, DeploymentName, DeploymentSpec, DeploymentView } from '../../shared/contracts/deployment.js';
import { CliError, type ApiClient } from '../client.js';
import { checked, connect, JSON_FLAG, print, listCommand, readDocument } from '../context.js';
import { GateResult, WorkloadProfile } from '../../shared/contracts/benchmark.js';
import { DeploymentTelemetry } from '../../shared/contracts/telemetry.js';
import { timeoutMs, waitUntil } from '../progress.js';
import { table } from '../table.js';

/** A deployment file: its `name` beside the spec (YAML or JSON), as `deployments show --json` prints one. */
const DeploymentFile = z.object({ name: DeploymentName }).passthrough();

async function readDeploymentFile(path: string): Promise<{ name: string; spec: unknown }> {
  const file = DeploymentFile.safeParse(await readDocument(path));
  if (!file.success) throw new CliError(`${path} needs a \`name\` (lowercase letters, digits, dots, dashes): ${file.error.issues[0]?.message}`, 2);
  // What the server adds to a view is dropped, so that `show --json` output can be edited and applied again.
  const {
    name,
    id: _id,
    generation: _g,
    createdAt: _c,
    updatedAt: _u,
    status: _s,
    events: _e,
    ...rest
  } = file.data as Record<string, unknown> & { name: string };
  checked(DeploymentSpec, rest, path);
  return { name, spec: rest };
}

/**
 * The deployment's last quarter hour in minutes (docs/telemetry.md): what the newest minute with traffic or samples
 * says of its queue, in-flight requests, KV-cache use, TTFT p95 and tokens per second.
 */
function telemetryLine(t: DeploymentTelemetry): string {
  const latest = [...t.points].reverse().find((p) => p.requests > 0 || p.replicas !== null);
  if (!latest) return 'telemetry:   none in the last 15 minutes';
  const n = (value: number | null, unit = '', digits = 0) => (value === null ? '-' : `${value.toFixed(digits)}${unit}`);
  return `telemetry:   ${latest.at}: queue ${n(latest.queueDepth)}, in flight ${n(latest.inFlight)}, KV ${latest.kvCacheUsage === null ? '-' : `${Math.round(latest.kvCacheUsage * 100)} %`}, TTFT p95 ${n(latest.ttftP95Ms, ' ms')}, ${n(latest.tokensPerSecond, ' tokens/s', 1)}, ${latest.requests} requests`;
}

/** The policy, and what the autoscaler last decided and why. */
function autoscaleLine(policy: NonNullable<DeploymentDetail['autoscale']>, last: DeploymentDetail['status']['autoscaler']): string {
  const { minReplicas, maxReplicas, target } = policy;
  const head = `autoscale:   ${minReplicas} to ${maxReplicas} replicas, ${target.metric} ${target.value}`;
  if (!last) return `${head}; no decision yet`;
  const move = last.action === 'hold' ? `holds ${last.to}` : `${last.action} from ${last.from} to ${last.to}`;
  return `${head}; ${last.at}: ${move}: ${last.reason}`;
}

function describe(d: DeploymentDetail, telemetry: DeploymentTelemetry): string {
  const s = d.status;
  const lines = [
    `name:        ${d.name} (generation ${d.generation})`,
    `model:       ${d.model}, runtime ${d.runtime.kind}${d.source ? `, serving ${d.source.kind === 'alias' ? `alias ${d.source.alias}` : `${d.source.model} ${d.source.version}`}` : ''}`,
    `replicas:    ${s.ready}/${s.desired} ready, ${s.starting} starting, ${s.failed} failed, ${s.unplaceable} unplaceable${s.asleep ? ' (scaled to zero: the next request wakes it)' : ''}`,
    `rollout:     ${s.rollout.state} (${s.rollout.updated} updated, ${s.rollout.outdated} outdated, ${s.rollout.retiring} retiring)`,
    telemetryLine(telemetry),
  ];
  if (d.autoscale) lines.push(autoscaleLine(d.autoscale, s.autoscaler));
  if (s.canary)
    lines.push(
      `canary:      ${s.canary.version}, ${d.canary?.weight ?? 0} % of requests: ${s.canary.ready}/${s.canary.desired} ready, ${s.canary.starting} starting`,
    );
  if (s.degraded) lines.push(`degraded:    ${s.degradedReasons.join('; ')}`);
  for (const r of s.unplaceableReasons) lines.push(`unplaceable: ${r.machineName}: ${r.reason}`);
  lines.push(
    '',
    table(
      ['REPLICA', 'MACHINE', 'SET', 'STATE', 'CURRENT', 'ROUTABLE', 'RESTARTS', 'MESSAGE'],
      s.replicas.map((r) => [
        r.assignmentId,
        r.machineName,
        r.track,
        r.state,
        r.current ? 'yes' : 'no',
        r.routable ? 'yes' : 'no',
        String(r.restarts),
        r.message ?? '',
      ]),
    ),
  );
  if (d.events.length)
    lines.push(
      '',
      table(
        ['AT', 'EVENT', 'MACHINE', 'MESSAGE'],
        d.events.map((e) => [e.at, e.type, e.machineId ?? '', e.message ?? '']),
      ),
    );
  return lines.join('\n');
}

/** The typed client's parameters of `/deployments/{name}` and the routes under it. */
const named = (name: string) => ({ params: { path: { name } } });

/** Waits until the rollout of `name` is complete with every desired replica serving. */
async function waitForRollout(api: ApiClient, name: string, seconds: string): Promise<DeploymentDetail> {
  let detail!: DeploymentDetail;
  await waitUntil(
    `rolling out ${name}`,
    async () => {
      detail = await api.answer(api.http.GET('/deployments/{name}', named(name)), DeploymentDetail);
      const s = detail.status;
      const done = s.rollout.state === 'complete' && s.ready === s.desired;
      const blocked = s.unplaceable ? `, ${s.unplaceable} unplaceable` : '';
      return { done, state: `${s.ready}/${s.desired} ready, ${s.starting} starting${blocked}` };
    },
    { timeoutMs: timeoutMs(seconds) },
  );
  return detail;
}

export function registerDeployments(program: Command): void {
  const deployments = program.command('deployments').description('what runs on the fleet');
  listCommand(program, deployments, {
    description: 'list deployments: replicas ready of desired, starting, unplaceable',
    path: '/deployments',
    item: DeploymentListItem,
    header: ['NAME', 'MODEL', 'REPLICAS', 'READY', 'STARTING', 'UNPLACEABLE', 'GENERATION', 'ID'],
    row: (d) => [
      d.name,
      d.model,
      String(d.replicas),
      `${d.status.ready}/${d.status.desired}`,
      String(d.status.starting),
      String(d.status.unplaceable),
      String(d.generation),
      d.id,
    ],
  });
  deployments
    .command('show <name>')
    .description('one deployment: replicas, rollout, its latest telemetry (queue, TTFT p95, tokens/s), unplaceable reasons, events')
    .option(...JSON_FLAG)
    .action(async (name: string, opts: { json?: boolean }) => {
      const api = await connect(program);
      const detail = await api.answer(api.http.GET('/deployments/{name}', named(name)), DeploymentDetail);
      if (opts.json) return print(true, detail, () => '');
      const telemetry = await api.answer(
        api.http.GET('/deployments/{name}/telemetry', { params: { path: { name }, query: { minutes: 15, points: 15 } } }),
        DeploymentTelemetry,
      );
      print(false, detail, () => describe(detail, telemetry));
    });
  const waitOptions = (command: Command) =>
    command
      .option('--wait', 'wait until the rollout is complete and every replica serves')
      .option('--timeout <seconds>', 'how long --wait waits', '600')
      .option(...JSON_FLAG);
  waitOptions(
    deployments
      .command('apply')
      .description('create or update a deployment from a YAML or JSON file (`-` reads stdin)')
      .requiredOption('-f, --file <file>', 'the deployment: its name and spec'),
  ).action(async (opts: { file: string; wait?: boolean; timeout: string; json?: boolean }) => {
    const { name, spec } = await readDeploymentFile(opts.file);
    const api = await connect(program);
    const view = await api.answer(api.http.PUT('/deployments/{name}', { ...named(name), body: spec as DeploymentSpec }), DeploymentView);
    const result = opts.wait ? await waitForRollout(api, name, opts.timeout) : view;
    print(opts.json, result, () => `${view.name}: applied, generation ${view.generation}${opts.wait ? ', rolled out' : ''}`);
  });
  waitOptions(deployments.command('scale <name> <replicas>').description('set the number of replicas; only the surplus or the missing ones change')).action(
    async (name: string, replicas: string, opts: { wait?: boolean; timeout: string; json?: boolean }) => {
      const count = Number(replicas);
      if (!Number.isInteger(count) || count < 0 || count > 1024) throw new CliError(`replicas must be a whole number from 0 to 1024, not ${replicas}`, 2);
      const api = await connect(program);
      const current = await api.answer(api.http.GET('/deployments/{name}', named(name)), DeploymentDetail);
      // The autoscaler owns its count: a PUT would keep it, so say so rather than print a count that does not hold.
      if (current.autoscale) {
        const { minReplicas, maxReplicas } = current.autoscale;
        throw new CliError(`${name} is autoscaled (${minReplicas} to ${maxReplicas} replicas): change its autoscale policy with \`deployments apply\``, 2);
      }
      const { id: _id, name: _n, generation: _g, createdAt: _c, updatedAt: _u, status: _s, events: _e, ...spec } = current;
      const view = await api.answer(api.http.PUT('/deployments/{name}', { ...named(name), body: { ...spec, replicas: count } }), DeploymentView);
      const result = opts.wait ? await waitForRollout(api, name, opts.timeout) : view;
      print(opts.json, result, () => `${name}: ${count} replica${count === 1 ? '' : 's'}${opts.wait ? ', all serving' : ''}`);
    },
  );
  deployments
    .command('gate <name>')
    .description("run the canary's readiness and benchmark gate (operator): passed moves its version to gated; exit 4 when it fails")
    .option('-f, --file <file>', 'the workload profile (YAML or JSON: name, requests, concurrency, prompt, maxTokens, thresholds)')
    .option('--profile <name>', "the profile's name when no file gives one", 'smoke')
    .option('--requests <n>', 'requests to send', (v) => Number(v))
    .option('--concurrency <n>', 'at once', (v) => Number(v))
    .option(...JSON_FLAG)
    .action(async (name: string, opts: { file?: string; profile: string; requests?: number; concurrency?: number; json?: boolean }) => {
      const given = opts.file ? ((await readDocument(opts.file)) as Record<string, unknown>) : {};
      const profile = checked(
        WorkloadProfile,
        { name: opts.profile, ...given, ...(opts.requests ? { requests: opts.requests } : {}), ...(opts.concurrency ? { concurrency: opts.concurrency } : {}) },
        'profile',
      );
      const api = await connect(program);
      const result = await api.answer(api.http.POST('/deployments/{name}/canary/gate', { ...named(name), body: profile }), GateResult);
      const e = result.run.evidence;
      print(opts.json, result, () =>
        [
          `${e.model} ${e.version} on ${e.hardware.map((h) => h.machine).join(', ')}: gate ${result.run.passed ? 'passed' : 'FAILED'}, version now ${result.version.state}`,
          table(
            ['REQUESTS', 'ERRORS', 'TTFT P50/P95/P99 MS', 'ITL P50/P95/P99 MS', 'TOKENS/S (REQ P50)', 'TOKENS/S (ALL)'],
            [
              [
                String(e.requests),
                String(e.errors),
                `${e.ttftMs.p50}/${e.ttftMs.p95}/${e.ttftMs.p99}`,
                `${e.interTokenMs.p50}/${e.interTokenMs.p95}/${e.interTokenMs.p99}`,
                String(e.tokensPerSecond.perRequestP50),
                String(e.tokensPerSecond.aggregate),
              ],
            ],
          ),
          ...e.failures.map((f) => `failed: ${f}`),
        ].join('\n'),
      );
      if (!result.run.passed) process.exitCode = 4;
    });
  deployments
    .command('delete <name>')
    .description('retire a deployment: its replicas drain and stop')
    .option(...JSON_FLAG)
    .action(async (name: string, opts: { json?: boolean }) => {
      const api = await connect(program);
      const result = await api.answer(api.http.DELETE('/deployments/{name}', named(name)), z.object({ id: z.string(), deleted: z.literal(true) }));
      print(opts.json, result, () => `${name}: deleted`);
    });
}
