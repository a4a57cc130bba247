import { readFile } from 'node:fs/promises';
import type { Command } from 'commander';
import { parse as parseYaml } from 'yaml';
import type { z } from 'zod';
import type { PagedPath, PageItem } from '../shared/api/client.js';
import { apiClient, CliError, type ApiClient } from './client.js';
import { readLogin } from './config.js';
import { table } from './table.js';

/**
 * Where the CLI finds the control plane and its token: `--url`, else LUNANEXA_URL, else the saved login; the
 * token from LUNANEXA_TOKEN, else the saved login. Never from the command line: a token there would sit in the
 * shell's history and every process listing.
 */
export async function connect(program: Command): Promise<ApiClient> {
  const saved = await readLogin();
  const url = (program.opts() as { url?: string }).url ?? process.env.LUNANEXA_URL ?? saved?.url;
  const token = process.env.LUNANEXA_TOKEN ?? saved?.token;
  if (!url) throw new CliError('no control plane URL: run `lunanexa login --url URL`, set LUNANEXA_URL or pass --url', 2);
  if (!URL.canParse(url)) throw new CliError(`not a URL: ${url}`, 2);
  if (!token) throw new CliError('no API token: run `lunanexa login` or set LUNANEXA_TOKEN (after npm start the admin token is in .lunanexa/admin.token)', 2);
  return apiClient(url, token);
}

/** JSON for scripts (`--json`), or what `human` renders. */
export function print(json: boolean | undefined, value: unknown, human: () => string): void {
  console.log(json ? JSON.stringify(value, null, 2) : human());
}

export function age(ms: number | null): string {
  if (ms === null) return '-';
  return ms < 10_000 ? `${(ms / 1000).toFixed(1)}s` : `${Math.round(ms / 1000)}s`;
}

/** A command's `--json` flag. */
export const JSON_FLAG = ['--json', 'machine-readable output'] as const;

/** Input checked against its contract here first, so that a typo is a one-line error (exit 2), not a round trip. */
export function checked<S extends z.ZodType>(schema: S, value: unknown, what: string): z.output<S> {
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new CliError(`${what}: ${issue.message}${issue.path.length ? ` at ${issue.path.join('.')}` : ''}`, 2);
  }
  return parsed.data;
}

/** Repeated `--flag key=value` options as a record, each value mapped by `value` (which throws on a bad one). */
export function keyValues<T>(flag: string, pairs: readonly string[] | undefined, value: (text: string, pair: string) => T): Record<string, T> {
  const out: Record<string, T> = {};
  for (const pair of pairs ?? []) {
    const at = pair.indexOf('=');
    if (at < 1) throw new CliError(`${flag} wants key=value, not ${pair}`, 2);
    out[pair.slice(0, at)] = value(pair.slice(at + 1), pair);
  }
  return out;
}

/** `<noun> ls`: every item of a management list (all pages), as a table of `header` columns or as JSON. */
export function listCommand<P extends PagedPath, T extends PageItem<P>>(
  program: Command,
  parent: Command,
  what: { description: string; path: P; item: z.ZodType<T>; header: string[]; row(item: T): string[] },
): void {
  parent
    .command('ls')
    .description(what.description)
    .option(...JSON_FLAG)
    .action(async (opts: { json?: boolean }) => {
      const list = await (await connect(program)).all(what.path, what.item);
      print(opts.json, list, () =>
        table(
          what.header,
          list.map((item) => what.row(item)),
        ),
      );
    });
}

/** A YAML or JSON document from a file (`-`: standard input); a file that cannot be read or parsed: exit 2. */
export async function readDocument(path: string): Promise<unknown> {
  let text: string;
  try {
    text = path === '-' ? await new Response(process.stdin as unknown as ReadableStream).text() : await readFile(path, 'utf8');
  } catch (error) {
    throw new CliError(`cannot read ${path}: ${(error as Error).message}`, 2);
  }
  try {
    return parseYaml(text);
  } catch (error) {
    throw new CliError(`${path} is neither YAML nor JSON: ${(error as Error).message}`, 2);
  }
}
