import { Command, CommanderError } from 'commander';
import type { z } from 'zod';
import { MachineView } from '../shared/contracts/machine.js';
import { DeploymentView } from '../shared/contracts/deployment.js';
import { apiClient, CliError, type ApiClient } from './client.js';
import { table } from './table.js';

/**
 * `lunanexa`, the operator's CLI over the management API. It reads the control plane's URL from `--url` or
 * LUNANEXA_URL and the API token from LUNANEXA_TOKEN only (a token on the command line would sit in the shell's
 * history and every process listing). Tables for people, `--json` for scripts. Exit codes: 0 done, 1 the API
 * refused or could not be reached, 2 the command was wrong or not configured.
 */
const program = new Command('lunanexa')
  .description('LunaNexa control plane CLI (management API)')
  .option('--url <url>', 'control plane URL (default: LUNANEXA_URL)')
  .exitOverride();

function client(): ApiClient {
  const url = (program.opts() as { url?: string }).url ?? process.env.LUNANEXA_URL;
  const token = process.env.LUNANEXA_TOKEN;
  if (!url) throw new CliError('no control plane URL: set LUNANEXA_URL or pass --url', 2);
  if (!URL.canParse(url)) throw new CliError(`not a URL: ${url}`, 2);
  if (!token) throw new CliError('no API token: set LUNANEXA_TOKEN (the admin token is in .lunanexa/admin.token after npm start)', 2);
  return apiClient(url, token);
}

const print = (json: boolean, value: unknown, human: () => string) => console.log(json ? JSON.stringify(value, null, 2) : human());
const age = (ms: number | null) => (ms === null ? '-' : ms < 10_000 ? `${(ms / 1000).toFixed(1)}s` : `${Math.round(ms / 1000)}s`);

/** `<noun> ls`: every item of a management list, as a table of `columns` or as JSON. */
function listCommand<T>(parent: Command, what: { description: string; path: string; item: z.ZodType<T>; header: string[]; row(item: T): string[] }): void {
  parent
    .command('ls')
    .description(what.description)
    .option('--json', 'machine-readable output')
    .action(async (opts: { json?: boolean }) => {
      const list = await client().all(what.path, what.item);
      print(opts.json ?? false, list, () => table(what.header, list.map(what.row)));
    });
}

listCommand(program.command('machines').description('the fleet'), {
  description: 'list machines: state, heartbeat age, runtimes',
  path: '/api/v1/machines',
  item: MachineView,
  header: ['NAME', 'STATE', 'HEARTBEAT', 'STREAM', 'RUNTIMES', 'ID'],
  row: (m) => [m.name, m.state, age(m.heartbeatAgeMs), m.streamAttached ? 'attached' : '-', String(m.runtimes.length), m.id],
});

listCommand(program.command('deployments').description('what runs on the fleet'), {
  description: 'list deployments',
  path: '/api/v1/deployments',
  item: DeploymentView,
  header: ['NAME', 'MODEL', 'REPLICAS', 'GENERATION', 'ID'],
  row: (d) => [d.name, d.model, String(d.replicas), String(d.generation), d.id],
});

program
  .command('status')
  .description('machines by state and the number of deployments')
  .option('--json', 'machine-readable output')
  .action(async (opts: { json?: boolean }) => {
    const api = client();
    const [fleet, deployed] = await Promise.all([api.all('/api/v1/machines', MachineView), api.all('/api/v1/deployments', DeploymentView)]);
    const byState: Record<string, number> = {};
    for (const m of fleet) byState[m.state] = (byState[m.state] ?? 0) + 1;
    const summary = { machines: fleet.length, byState, deployments: deployed.length };
    print(opts.json ?? false, summary, () =>
      [`machines: ${fleet.length} (${Object.entries(byState).map(([s, n]) => `${n} ${s}`).join(', ') || 'none'})`, `deployments: ${deployed.length}`].join('\n'),
    );
  });

try {
  await program.parseAsync(process.argv);
} catch (error) {
  if (error instanceof CliError) {
    console.error(`lunanexa: ${error.message}`);
    process.exitCode = error.exitCode;
  } else if (error instanceof CommanderError) {
    // Help and version end here too, with code 0; commander has already printed what it had to say.
    process.exitCode = error.exitCode === 0 ? 0 : 2;
  } else {
    throw error;
  }
}
