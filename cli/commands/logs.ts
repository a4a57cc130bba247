import type { Command } from 'commander';
import { z } from 'zod';
import { CliError } from '../client.js';
import { connect } from '../context.js';
import { printableLine } from '../table.js';
import { findMachine } from './machines.js';

const LogLines = z.object({ lines: z.array(z.string()) });

/**
 * The lines of `next` that follow what was printed: the node keeps a ring of lines without sequence numbers, so
 * the new tail is found by where the last printed lines end in it. When they are gone (the ring moved on by
 * more than one fetch) everything is new.
 */
export function unseenLines(printed: readonly string[], next: readonly string[]): string[] {
  for (let overlap = Math.min(printed.length, next.length); overlap > 0; overlap -= 1) {
    let same = true;
    for (let i = 0; i < overlap && same; i += 1) same = printed[printed.length - overlap + i] === next[i];
    if (same) return next.slice(overlap);
  }
  return [...next];
}

/** The options of a command that prints a log tail from a node (`logs`, `runs logs`). */
export interface TailOptions {
  lines: string;
  follow?: boolean;
  interval: string;
  raw?: boolean;
}

/** Adds `-n`, `-f`, `--interval` and `--raw` to a command that prints a log tail from a node. */
export function tailOptions(command: Command): Command {
  return command
    .option('-n, --lines <n>', 'lines to show', '100')
    .option('-f, --follow', 'keep printing new lines')
    .option('--interval <seconds>', 'how often --follow asks', '2')
    .option('--raw', 'the lines as the process wrote them, control characters included (only when the output is not a terminal)');
}

/** `--lines` as a number, or exit 2. */
export function tailLines(opts: TailOptions): number {
  const lines = Number(opts.lines);
  if (!Number.isInteger(lines) || lines < 1 || lines > 1000) throw new CliError('--lines must be 1-1000', 2);
  return lines;
}

/** Prints the tail `fetch` gets from the node, then with --follow what is new at each interval. */
export async function printTail(opts: TailOptions, fetch: () => Promise<string[]>): Promise<void> {
  // What a node's process wrote has its control characters shown visibly (`printableLine`); a terminal never gets
  // them, --raw or not: only a pipe or a file does, when asked.
  const show = opts.raw && !process.stdout.isTTY ? (line: string) => line : printableLine;
  let printed: string[] = [];
  for (;;) {
    const tail = await fetch();
    for (const line of unseenLines(printed, tail)) console.log(show(line));
    printed = tail;
    if (!opts.follow) return;
    await new Promise((resolve) => setTimeout(resolve, Math.max(0.5, Number(opts.interval) || 2) * 1000));
  }
}

export function registerLogs(program: Command): void {
  tailOptions(
    program
      .command('logs <machine> <runtime>')
      .description("a runtime's log tail, fetched from its node over the node's own stream (runtime: a deployment name or replica id)"),
  ).action(async (machine: string, runtime: string, opts: TailOptions) => {
    const lines = tailLines(opts);
    const api = await connect(program);
    const m = await findMachine(api, machine);
    const replica = m.runtimes.find((r) => r.assignmentId === runtime) ?? m.runtimes.find((r) => r.deploymentName === runtime && r.desired);
    if (!replica)
      throw new CliError(
        `${m.name} runs no replica ${runtime}: it runs ${m.runtimes.map((r) => `${r.deploymentName} (${r.assignmentId})`).join(', ') || 'nothing'}`,
        1,
      );
    const params = { path: { id: m.id, assignmentId: replica.assignmentId }, query: { lines } };
    await printTail(opts, async () => (await api.answer(api.http.GET('/machines/{id}/runtimes/{assignmentId}/logs', { params }), LogLines)).lines);
  });
}
