import { readFile } from 'node:fs/promises';
import type { Command } from 'commander';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { DeploymentDetail, DeploymentName, DeploymentSpec, DeploymentView } from '../../shared/contracts/deployment.js';
import { CliError, type ApiClient } from '../client.js';
import { checked, connect, JSON_FLAG, print, listCommand } from '../context.js';
import { timeoutMs, waitUntil } from '../progress.js';
import { table } from '../table.js';

/** A deployment file: its `name` beside the spec (YAML or JSON), as `deployments show --json` prints one. */
const DeploymentFile = z.object({ name: DeploymentName }).passthrough();

async function readDeploymentFile(path: string): Promise<{ name: string; spec: unknown }> {
  let text: string;
  try {
    text = path === '-' ? await new Response(process.stdin as unknown as ReadableStream).text() : await readFile(path, 'utf8');
  } catch (error) {
    throw new CliError(`cannot read ${path}: ${(error as Error).message}`, 2);
  }
  let value: unknown;
  try {
    value = parseYaml(text);
  } catch (error) {
    throw new CliError(`${path} is neither YAML nor JSON: ${(error as Error).message}`, 2);
  }
  const file = DeploymentFile.safeParse(value);
  if (!file.success) throw new CliError(`${path} needs a \`name\` (lowercase letters, digits, dots, dashes): ${file.error.issues[0]?.message}`, 2);
  // What the server adds to a view is dropped, so that `show --json` output can be edited and applied again.
  const { name, id: _id, generation: _g, createdAt: _c, updatedAt: _u, status: _s, events: _e, ...rest } = file.data as Record<string, unknown> & { name: string };
  checked(DeploymentSpec, rest, path);
  return { name, spec: rest };
}

function describe(d: DeploymentDetail): string {
  const s = d.status;
  const lines = [
    `name:        ${d.name} (generation ${d.generation})`,
    `model:       ${d.model}, runtime ${d.runtime.kind}`,
    `replicas:    ${s.ready}/${s.desired} ready, ${s.starting} starting, ${s.failed} failed, ${s.unplaceable} unplaceable`,
    `rollout:     ${s.rollout.state} (${s.rollout.updated} updated, ${s.rollout.outdated} outdated, ${s.rollout.retiring} retiring)`,
  ];
  if (s.degraded) lines.push(`degraded:    ${s.degradedReasons.join('; ')}`);
  for (const r of s.unplaceableReasons) lines.push(`unplaceable: ${r.machineName}: ${r.reason}`);
  lines.push('', table(['REPLICA', 'MACHINE', 'STATE', 'CURRENT', 'ROUTABLE', 'RESTARTS', 'MESSAGE'], s.replicas.map((r) => [r.assignmentId, r.machineName, r.state, r.current ? 'yes' : 'no', r.routable ? 'yes' : 'no', String(r.restarts), r.message ?? ''])));
  if (d.events.length) lines.push('', table(['AT', 'EVENT', 'MACHINE', 'MESSAGE'], d.events.map((e) => [e.at, e.type, e.machineId ?? '', e.message ?? ''])));
  return lines.join('\n');
}

const detailPath = (name: string) => `/api/v1/deployments/${encodeURIComponent(name)}`;

/** Waits until the rollout of `name` is complete with every desired replica serving. */
async function waitForRollout(api: ApiClient, name: string, seconds: string): Promise<DeploymentDetail> {
  let detail!: DeploymentDetail;
  await waitUntil(`rolling out ${name}`, async () => {
    detail = await api.call(detailPath(name), DeploymentDetail);
    const s = detail.status;
    const done = s.rollout.state === 'complete' && s.ready === s.desired;
    const blocked = s.unplaceable ? `, ${s.unplaceable} unplaceable` : '';
    return { done, state: `${s.ready}/${s.desired} ready, ${s.starting} starting${blocked}` };
  }, { timeoutMs: timeoutMs(seconds) });
  return detail;
}

export function registerDeployments(program: Command): void {
  const deployments = program.command('deployments').description('what runs on the fleet');
  listCommand(program, deployments, {
    description: 'list deployments',
    path: '/api/v1/deployments',
    item: DeploymentView,
    header: ['NAME', 'MODEL', 'REPLICAS', 'GENERATION', 'ID'],
    row: (d) => [d.name, d.model, String(d.replicas), String(d.generation), d.id],
  });
  deployments
    .command('show <name>')
    .description('one deployment: replicas, rollout, unplaceable reasons, events')
    .option(...JSON_FLAG)
    .action(async (name: string, opts: { json?: boolean }) => {
      const detail = await (await connect(program)).call(detailPath(name), DeploymentDetail);
      print(opts.json, detail, () => describe(detail));
    });
  const waitOptions = (command: Command) => command.option('--wait', 'wait until the rollout is complete and every replica serves').option('--timeout <seconds>', 'how long --wait waits', '600').option(...JSON_FLAG);
  waitOptions(
    deployments
      .command('apply')
      .description('create or update a deployment from a YAML or JSON file (`-` reads stdin)')
      .requiredOption('-f, --file <file>', 'the deployment: its name and spec'),
  ).action(async (opts: { file: string; wait?: boolean; timeout: string; json?: boolean }) => {
    const { name, spec } = await readDeploymentFile(opts.file);
    const api = await connect(program);
    const view = await api.call(detailPath(name), DeploymentView, { method: 'PUT', body: spec });
    const result = opts.wait ? await waitForRollout(api, name, opts.timeout) : view;
    print(opts.json, result, () => `${view.name}: applied, generation ${view.generation}${opts.wait ? ', rolled out' : ''}`);
  });
  waitOptions(deployments.command('scale <name> <replicas>').description('set the number of replicas; only the surplus or the missing ones change')).action(
    async (name: string, replicas: string, opts: { wait?: boolean; timeout: string; json?: boolean }) => {
      const count = Number(replicas);
      if (!Number.isInteger(count) || count < 0 || count > 1024) throw new CliError(`replicas must be a whole number from 0 to 1024, not ${replicas}`, 2);
      const api = await connect(program);
      const current = await api.call(detailPath(name), DeploymentDetail);
      const { id: _id, name: _n, generation: _g, createdAt: _c, updatedAt: _u, status: _s, events: _e, ...spec } = current;
      const view = await api.call(detailPath(name), DeploymentView, { method: 'PUT', body: { ...spec, replicas: count } });
      const result = opts.wait ? await waitForRollout(api, name, opts.timeout) : view;
      print(opts.json, result, () => `${name}: ${count} replica${count === 1 ? '' : 's'}${opts.wait ? ', all serving' : ''}`);
    },
  );
  deployments
    .command('delete <name>')
    .description('retire a deployment: its replicas drain and stop')
    .option(...JSON_FLAG)
    .action(async (name: string, opts: { json?: boolean }) => {
      const result = await (await connect(program)).call(detailPath(name), z.object({ id: z.string(), deleted: z.literal(true) }), { method: 'DELETE' });
      print(opts.json, result, () => `${name}: deleted`);
    });
}
