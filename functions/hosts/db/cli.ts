import { errorFields } from '../../kernel/telemetry/error-fields.js';
import type { Store } from '../../store/db.js';
import { openPgStore } from '../../store/pg.js';

/**
 * What the `npm run db:*` commands share: DATABASE_URL (and LUNANEXA_DATABASE_OWNER_URL when set), read and
 * checked, and the store opened on it with the committed migrations applied. Their messages name the variable,
 * never its value: it holds a password.
 */

/** Exit codes: 1 the command failed (database unreachable, refused), 2 it was called wrongly (DATABASE_URL, flags). */
export const EXIT_FAILED = 1;
export const EXIT_USAGE = 2;

/** A failure a command reports as one line on stderr and its exit code, without a stack. */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode: number = EXIT_FAILED,
  ) {
    super(message);
    this.name = 'CliError';
  }
}

const EXAMPLE = 'postgres://user:password@host:5432/db';

/** The variables that hold a database URL, and so a password. */
const URL_VARIABLES = ['DATABASE_URL', 'LUNANEXA_DATABASE_OWNER_URL'] as const;

/** A postgres:// URL from `env[name]`, or a usage error saying what is wrong with it. */
function postgresUrl(env: NodeJS.ProcessEnv, name: (typeof URL_VARIABLES)[number]): string | undefined {
  const value = env[name]?.trim();
  if (!value) return undefined;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new CliError(`${name} is not a valid URL (its value is not shown: it holds a password); expected ${EXAMPLE}`, EXIT_USAGE);
  }
  if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:') {
    throw new CliError(`${name} is not a postgres:// or postgresql:// URL (its value is not shown: it holds a password); expected ${EXAMPLE}`, EXIT_USAGE);
  }
  return value;
}

/**
 * DATABASE_URL from `env`, and LUNANEXA_DATABASE_OWNER_URL when set (the role that migrates, docs/operations.md,
 * "Database roles"), or a usage error saying what to set.
 */
export function databaseUrlsFrom(env: NodeJS.ProcessEnv, command: string): { url: string; ownerUrl?: string } {
  const url = postgresUrl(env, 'DATABASE_URL');
  if (!url) throw new CliError(`DATABASE_URL is not set: run DATABASE_URL=${EXAMPLE} npm run ${command}`, EXIT_USAGE);
  return { url, ownerUrl: postgresUrl(env, 'LUNANEXA_DATABASE_OWNER_URL') };
}

/** `message` without the database URLs or their passwords, should a driver ever repeat them. */
function redact(message: string, env: NodeJS.ProcessEnv = process.env): string {
  let out = message;
  for (const name of URL_VARIABLES) {
    const value = env[name]?.trim();
    if (!value) continue;
    out = out.split(value).join(`<${name}>`);
    let password = '';
    try {
      password = new URL(value).password;
      password = decodeURIComponent(password);
    } catch {
      // Not a URL, or a password that is not valid percent-encoding: what was read so far is matched as written.
    }
    if (password.length >= 3) out = out.split(password).join('***');
  }
  return out;
}

/**
 * Opens the PostgreSQL store at `url` and applies the committed migrations that are not applied yet (none on an
 * up-to-date database), as the Node control plane does at start: as `ownerUrl`'s role when given. A database that
 * cannot be reached or migrated is a CliError that says why (runCli() prints it without the URLs).
 */
export async function openMigratedStore({ url, ownerUrl }: { url: string; ownerUrl?: string }): Promise<Store> {
  try {
    return await openPgStore(url, { max: 1, ownerUrl });
  } catch (error) {
    const fields = errorFields(error);
    const detail = typeof fields === 'string' ? fields : fields.message || fields.code;
    const where = ownerUrl ? 'DATABASE_URL and LUNANEXA_DATABASE_OWNER_URL' : 'DATABASE_URL';
    throw new CliError(`cannot connect to or migrate the database at ${where}: ${detail || 'unknown error'}`);
  }
}

/** Runs a command's body: a CliError becomes its message on stderr and its exit code; anything else, exit 1. */
export async function runCli(main: () => Promise<void>): Promise<void> {
  try {
    await main();
  } catch (error) {
    if (error instanceof CliError) {
      console.error(redact(error.message));
      process.exit(error.exitCode);
    }
    const fields = errorFields(error);
    console.error(redact(`failed: ${typeof fields === 'string' ? fields : fields.message}`));
    process.exit(EXIT_FAILED);
  }
}
