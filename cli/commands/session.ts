import type { Command } from 'commander';
import { MachineView } from '../../shared/contracts/machine.js';
import { DeploymentListItem } from '../../shared/contracts/deployment.js';
import { pageOf } from '../../shared/contracts/page.js';
import { apiClient, CliError } from '../client.js';
import { loginPath, removeLogin, saveLogin } from '../config.js';
import { connect, JSON_FLAG, print } from '../context.js';

/** The token from standard input: typed without echo on a terminal, or piped (`lunanexa login < token-file`). */
async function readToken(): Promise<string> {
  if (!process.stdin.isTTY) return (await new Response(process.stdin as unknown as ReadableStream).text()).trim();
  process.stderr.write('API token: ');
  process.stdin.setRawMode(true);
  let token = '';
  try {
    for await (const chunk of process.stdin) {
      for (const char of String(chunk)) {
        if (char === '\r' || char === '\n') return token;
        if (char === '\u0003') throw new CliError('cancelled', 2);
        token = char === '\u007f' ? token.slice(0, -1) : token + char;
      }
    }
    return token;
  } finally {
    process.stdin.setRawMode(false);
    process.stderr.write('\n');
  }
}

export function registerSession(program: Command): void {
  program
    .command('login')
    .description('check an API token (read from standard input) against the control plane of --url or LUNANEXA_URL, and save both for later commands')
    .action(async () => {
      const url = (program.opts() as { url?: string }).url ?? process.env.LUNANEXA_URL;
      if (!url) throw new CliError('lunanexa login --url <control plane URL>', 2);
      if (!URL.canParse(url)) throw new CliError(`not a URL: ${url}`, 2);
      const token = await readToken();
      if (!token) throw new CliError('no token on standard input', 2);
      // Any management read proves the token and the URL; a viewer token is enough.
      const api = apiClient(url, token);
      await api.answer(api.http.GET('/machines', { params: { query: { limit: 1 } } }), pageOf(MachineView));
      const path = await saveLogin({ url, token });
      console.log(`logged in to ${url}; saved to ${path} (readable only by you)`);
    });
  program
    .command('logout')
    .description('forget the saved login (the token itself stays valid: revoke it with `lunanexa tokens revoke`)')
    .action(async () => {
      console.log((await removeLogin()) ? `removed ${loginPath()}` : 'no saved login');
    });
  program
    .command('status')
    .description('machines by state and the number of deployments')
    .option(...JSON_FLAG)
    .action(async (opts: { json?: boolean }) => {
      const api = await connect(program);
      const [fleet, deployed] = await Promise.all([api.all('/machines', MachineView), api.all('/deployments', DeploymentListItem)]);
      const byState: Record<string, number> = {};
      for (const m of fleet) byState[m.state] = (byState[m.state] ?? 0) + 1;
      const summary = { machines: fleet.length, byState, deployments: deployed.length };
      print(opts.json, summary, () =>
        [
          `machines: ${fleet.length} (${
            Object.entries(byState)
              .map(([s, n]) => `${n} ${s}`)
              .join(', ') || 'none'
          })`,
          `deployments: ${deployed.length}`,
        ].join('\n'),
      );
    });
}
