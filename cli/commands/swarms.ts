import type { Command } from 'commander';
import { SwarmConfig, SwarmDown, SwarmName, SwarmView } from '../../shared/contracts/swarm.js';
import { CliError, type ApiClient } from '../client.js';
import { checked, connect, JSON_FLAG, listCommand, print, readDocument } from '../context.js';
import { timeoutMs, waitUntil } from '../progress.js';

/** The typed client's parameters of `/swarms/{name}`. */
const named = (name: string) => ({ params: { path: { name } } });

/** A swarm's endpoint as a URL: the plane answers the path `/v1` where it does not know its public URL. */
const endpointOf = (api: ApiClient, s: SwarmView) => new URL(s.endpoint, api.url).href;

/** Jobs by state, the states that have any: `3 (1 running, 2 completed)`. */
function jobsText(s: SwarmView): string {
  const { total, ...states } = s.jobs;
  const some = Object.entries(states).filter(([, n]) => n > 0);
  return some.length === 0 ? String(total) : `${total} (${some.map(([state, n]) => `${n} ${state}`).join(', ')})`;
}

const replicasText = (s: SwarmView) => `${s.replicas.ready}/${s.replicas.desired} ready, ${s.replicas.starting} starting, ${s.replicas.failed} failed`;

function describe(api: ApiClient, s: SwarmView): string {
  const lines = [
    `name:       ${s.name} (${s.id})`,
    `status:     ${s.status}: ${replicasText(s)}`,
    `deployment: ${s.deployment}`,
    `endpoint:   ${endpointOf(api, s)} (model ${s.model})`,
    `jobs:       ${jobsText(s)}`,
  ];
  for (const reason of s.reasons) lines.push(`degraded:   ${reason}`);
  lines.push(`created:    ${s.createdAt}, updated ${s.updatedAt}`);
  return lines.join('\n');
}

async function findSwarm(api: ApiClient, name: string): Promise<SwarmView> {
  if (!SwarmName.safeParse(name).success)
    throw new CliError(`${name} is not a swarm name (lowercase letters, digits, dots, dashes): see \`lunanexa swarm ls\``, 2);
  return await api.answer(api.http.GET('/swarms/{name}', named(name)), SwarmView);
}

/** Serving: a replica answers requests (or nothing is wanted of it: 0 replicas). */
const serving = (s: SwarmView) => s.replicas.ready >= 1 || s.status === 'ready' || s.status === 'stopped';

export function registerSwarms(program: Command): void {
  const swarm = program
    .command('swarm')
    .alias('swarms')
    .description('swarms: an endpoint (a deployment) and the jobs that use it, brought up and down as one (docs/jobs.md, "Swarms")');
  swarm
    .command('up')
    .description('create a swarm, or reconcile it and its deployment, from a YAML or JSON file (`-` reads stdin): {name, deployment, jobs} (operator)')
    .requiredOption('-f, --file <file>', 'the swarm')
    .option('--wait', 'wait until it serves: a replica of its deployment ready')
    .option('--timeout <seconds>', 'how long --wait waits', '600')
    .option(...JSON_FLAG)
    .action(async (opts: { file: string; wait?: boolean; timeout: string; json?: boolean }) => {
      const config = checked(SwarmConfig, await readDocument(opts.file), opts.file);
      const api = await connect(program);
      let view = await api.answer(api.http.PUT('/swarms/{name}', { ...named(config.name), body: config }), SwarmView);
      if (opts.wait) {
        await waitUntil(
          `swarm ${view.name}`,
          async () => {
            view = await findSwarm(api, view.name);
            return { done: serving(view), state: `${view.status}: ${replicasText(view)}` };
          },
          { timeoutMs: timeoutMs(opts.timeout) },
        );
      }
      print(opts.json, view, () => `${view.name}: up (${view.status}), endpoint ${endpointOf(api, view)}, model ${view.model}`);
    });
  listCommand(program, swarm, {
    description: "list the workspace's swarms: status, replicas ready, model, jobs",
    path: '/swarms',
    item: SwarmView,
    header: ['NAME', 'STATUS', 'READY', 'DEPLOYMENT', 'MODEL', 'JOBS', 'CREATED'],
    row: (s) => [s.name, s.status, `${s.replicas.ready}/${s.replicas.desired}`, s.deployment, s.model, jobsText(s), s.createdAt],
  });
  swarm
    .command('status <name>')
    .description("one swarm: its deployment's state, its endpoint and model, its jobs by state")
    .option(...JSON_FLAG)
    .action(async (name: string, opts: { json?: boolean }) => {
      const api = await connect(program);
      const view = await findSwarm(api, name);
      print(opts.json, view, () => describe(api, view));
    });
  swarm
    .command('down <name>')
    .description('bring a swarm down: cancel its unfinished jobs, retire its deployment, remove it (operator)')
    .option(...JSON_FLAG)
    .action(async (name: string, opts: { json?: boolean }) => {
      if (!SwarmName.safeParse(name).success) throw new CliError(`${name} is not a swarm name: see \`lunanexa swarm ls\``, 2);
      const api = await connect(program);
      const down = await api.answer(api.http.DELETE('/swarms/{name}', named(name)), SwarmDown);
      print(opts.json, down, () => {
        const jobs = down.cancelledJobs.length;
        return `${down.name}: down, ${jobs} job${jobs === 1 ? '' : 's'} cancelled${down.deploymentDeleted ? ', its deployment retired' : ''}`;
      });
    });
}
