import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as WebStream } from 'node:stream/web';
import type { Command } from 'commander';
import { UsageReport } from '../../shared/contracts/usage.js';
import { connect, JSON_FLAG, print } from '../context.js';
import { table } from '../table.js';

export function registerUsage(program: Command): void {
  program
    .command('usage')
    .description('prompt and completion tokens per UTC day, API token and model')
    .option('--from <day>', 'first day, YYYY-MM-DD (default: 30 days before --to)')
    .option('--to <day>', 'last day, YYYY-MM-DD, included (default: today)')
    .option('--by <dimensions>', 'group by any of day,token,model', 'day,token,model')
    .option('--csv', 'CSV with a header row, for a spreadsheet')
    .option(...JSON_FLAG)
    .action(async (opts: { from?: string; to?: string; by: string; csv?: boolean; json?: boolean }) => {
      const query = { groupBy: opts.by, ...(opts.from ? { from: opts.from } : {}), ...(opts.to ? { to: opts.to } : {}) };
      const api = await connect(program);
      if (opts.csv) {
        const csv = api.http.GET('/usage', { params: { query: { ...query, format: 'csv' } }, parseAs: 'stream' });
        await pipeline(Readable.fromWeb((await api.stream(csv)) as WebStream), process.stdout);
        return;
      }
      const report = await api.answer(api.http.GET('/usage', { params: { query } }), UsageReport);
      const total = report.data.reduce(
        (sum, r) => ({ requests: sum.requests + r.requests, prompt: sum.prompt + r.promptTokens, completion: sum.completion + r.completionTokens }),
        { requests: 0, prompt: 0, completion: 0 },
      );
      print(opts.json, report, () =>
        [
          `${report.from} .. ${report.to}, by ${report.groupBy.join(', ')}`,
          table(
            ['DAY', 'TOKEN', 'MODEL', 'REQUESTS', 'PROMPT', 'COMPLETION'],
            [
              ...report.data.map((r) => [
                r.day ?? '*',
                r.tokenName ?? r.tokenId ?? '*',
                r.model ?? '*',
                String(r.requests),
                String(r.promptTokens),
                String(r.completionTokens),
              ]),
              ['total', '', '', String(total.requests), String(total.prompt), String(total.completion)],
            ],
          ),
        ].join('\n'),
      );
    });
}
