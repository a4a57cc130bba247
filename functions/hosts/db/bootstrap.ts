import { parseArgs } from 'node:util';
import { createApiToken, ensureWorkspace, hasActiveApiToken } from '../../services/api-tokens.js';
import { ROOT_WORKSPACE } from '../../services/workspaces.js';
import type { ServiceCtx } from '../../services/service-context.js';
import { CliError, EXIT_USAGE, databaseUrlsFrom, openMigratedStore, runCli } from './cli.js';

/**
 * `npm run db:bootstrap`: makes a fresh DATABASE_URL ready for a control plane that does not bootstrap itself
 * (the Worker): applies the migrations not applied yet (as db:migrate), creates the default workspace and mints
 * the first admin API token. The token is printed once, alone on stdout (`TOKEN=$(npm run --silent
 * db:bootstrap)`); only its hash is stored. A database that already has an active admin token is refused unless
 * --force is given: the token would be a second admin credential, and nothing would show where the first went.
 */
const USAGE = 'usage: DATABASE_URL=postgres://user:password@host:5432/db npm run db:bootstrap [-- --force]';

await runCli(async () => {
  let force: boolean;
  try {
    const { values } = parseArgs({
      args: process.argv.slice(2),
      options: { force: { type: 'boolean', default: false }, help: { type: 'boolean', short: 'h' } },
    });
    if (values.help) {
      console.error(`${USAGE}\n  --force  mint another admin token even though the database has an active one (the existing ones stay valid)`);
      return;
    }
    force = values.force ?? false;
  } catch (error) {
    throw new CliError(`${error instanceof Error ? error.message : String(error)}\n${USAGE}`, EXIT_USAGE);
  }
  const store = await openMigratedStore(databaseUrlsFrom(process.env, 'db:bootstrap'));
  try {
    const ctx: ServiceCtx = { db: store.db, actor: 'system' };
    if (!force && (await hasActiveApiToken({ ctx, input: { role: 'admin' } }))) {
      throw new CliError(
        'refused: this database already has an active admin API token, and db:bootstrap mints only the first one. ' +
          'Use the admin token you saved; if it is lost, run `npm run db:bootstrap -- --force` to mint another (the existing ones stay valid).',
      );
    }
    const workspaceId = await ensureWorkspace({ ctx, input: { name: ROOT_WORKSPACE } });
    const { token } = await createApiToken({ ctx, input: { workspaceId, name: 'db:bootstrap admin', role: 'admin' } });
    process.stdout.write(`${token}\n`);
    console.error('admin API token for workspace "default" printed above, shown this once (only its hash is stored): save it now');
  } finally {
    await store.close();
  }
});
