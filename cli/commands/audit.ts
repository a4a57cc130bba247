import { createWriteStream } from 'node:fs';
import { open } from 'node:fs/promises';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as WebStream } from 'node:stream/web';
import { createInterface } from 'node:readline';
import type { Command } from 'commander';
import { AuditEntry, AuditOutcome, AuditPage } from '../../shared/contracts/audit.js';
import { ChainVerifier } from '../../shared/audit-chain.js';
import type { ManagementPaths } from '../../shared/api/client.js';
import { CliError } from '../client.js';
import { connect, JSON_FLAG, print } from '../context.js';
import { table } from '../table.js';

type AuditQuery = ManagementPaths['/audit']['get']['parameters']['query'];

/** Each entry of a JSON Lines export, checked against the contract; a line that is not one stops with exit 2. */
async function* exportEntries(lines: AsyncIterable<string>, source: string): AsyncGenerator<AuditEntry> {
  let number = 0;
  for await (const line of lines) {
    number += 1;
    if (line.trim() === '') continue;
    let json: unknown;
    try {
      json = JSON.parse(line);
    } catch {
      throw new CliError(`${source}: line ${number} is not JSON: not an audit export`, 2);
    }
    const entry = AuditEntry.safeParse(json);
    if (!entry.success) throw new CliError(`${source}: line ${number} is not an audit entry (${entry.error.issues[0]?.message})`, 2);
    yield entry.data;
  }
}

async function openExport(path: string): Promise<Readable> {
  try {
    return (await open(path)).createReadStream();
  } catch (error) {
    throw new CliError(`cannot read ${path}: ${(error as Error).message}`, 2);
  }
}

export function registerAudit(program: Command): void {
  const audit = program.command('audit').description("the workspace's audit log: append-only and hash-chained (admin)");
  audit
    .command('ls')
    .description('recent entries, newest first')
    .option('--action <action>', 'only this action')
    .option('--actor <actor>', 'only this actor (tok_..., mch_..., system)')
    .option('--target <target>', 'only entries about this object')
    .option('--outcome <outcome>', `only ${AuditOutcome.options.join(' | ')}`)
    .option('--since <time>', 'only at or after this ISO-8601 time')
    .option('-n, --limit <n>', 'entries to show', '50')
    .option(...JSON_FLAG)
    .action(async (opts: { action?: string; actor?: string; target?: string; outcome?: string; since?: string; limit: string; json?: boolean }) => {
      const query: NonNullable<AuditQuery> = { limit: Number(opts.limit) };
      for (const key of ['action', 'actor', 'target', 'since'] as const) if (opts[key]) query[key] = opts[key];
      if (opts.outcome) query.outcome = opts.outcome as AuditOutcome;
      const api = await connect(program);
      const page = await api.answer(api.http.GET('/audit', { params: { query } }), AuditPage);
      print(opts.json, page.data, () =>
        table(
          ['SEQ', 'AT', 'ACTOR', 'ACTION', 'TARGET', 'OUTCOME'],
          page.data.map((e) => [String(e.seq), e.at, e.actor, e.action, e.target, e.outcome]),
        ),
      );
    });
  audit
    .command('export')
    .description('the whole chain as JSON Lines, oldest first (to keep, or to verify later)')
    .option('-o, --output <file>', 'write to a file (0600) instead of stdout')
    .action(async (opts: { output?: string }) => {
      const api = await connect(program);
      const body = await api.stream(api.http.GET('/audit/export', { parseAs: 'stream' }));
      await pipeline(Readable.fromWeb(body as WebStream), opts.output ? createWriteStream(opts.output, { mode: 0o600 }) : process.stdout);
    });
  audit
    .command('verify')
    .description("check the chain here, not on the server's word: every entry's hash, its link to the one before, no gap (exit 4 when broken)")
    .option('-f, --file <file>', 'verify a saved export instead of downloading one')
    .option(...JSON_FLAG)
    .action(async (opts: { file?: string; json?: boolean }) => {
      const source = opts.file ?? 'the export';
      const api = opts.file ? undefined : await connect(program);
      const input = api
        ? Readable.fromWeb((await api.stream(api.http.GET('/audit/export', { parseAs: 'stream' }))) as WebStream)
        : await openExport(opts.file!);
      const verifier = new ChainVerifier();
      for await (const entry of exportEntries(createInterface({ input, crlfDelay: Infinity }), source)) if (!(await verifier.push(entry))) break;
      const verdict = verifier.verdict();
      print(opts.json, verdict, () =>
        verdict.ok
          ? `intact: ${verdict.entries} entries${verdict.legacy ? ` (${verdict.legacy} from before the chain, unverifiable)` : ''}; head ${verdict.head || '(empty chain)'}`
          : `BROKEN at seq ${verdict.brokenAt.seq} (${verdict.brokenAt.id}): ${verdict.reason}`,
      );
      if (!verdict.ok) process.exitCode = 4;
    });
}
