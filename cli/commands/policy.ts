import type { Command } from 'commander';
import { WorkspacePolicy } from '../../shared/contracts/placement.js';
import { checked, connect, JSON_FLAG, print, readDocument } from '../context.js';
import { table } from '../table.js';

const labels = (selector: Record<string, string>) =>
  Object.entries(selector)
    .map(([k, v]) => `${k}=${v}`)
    .join(',') || 'any machine';

function describe(policy: WorkspacePolicy): string {
  const quota =
    Object.entries(policy.quota)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ') || 'none';
  const classes = Object.entries(policy.dataClasses).map(([name, rule]) => [
    name,
    labels(rule.machineSelector),
    rule.runtimes?.join(',') ?? 'any',
    rule.retention,
  ]);
  const licences = Object.entries(policy.licences).map(([licence, rule]) => [licence, labels(rule.machineSelector)]);
  return [
    `quota: ${quota}`,
    classes.length ? table(['DATA CLASS', 'MACHINES', 'RUNTIMES', 'RETENTION'], classes) : 'no data classes',
    licences.length ? table(['LICENCE', 'MACHINES'], licences) : 'no licence rules',
  ].join('\n\n');
}

export function registerPolicy(program: Command): void {
  const policy = program.command('policy').description("the workspace's placement policy: quota, data classes, licence rules");
  policy
    .command('show')
    .description('print the policy')
    .option(...JSON_FLAG)
    .action(async (opts: { json?: boolean }) => {
      const api = await connect(program);
      const current = await api.answer(api.http.GET('/workspaces/current/policy'), WorkspacePolicy);
      print(opts.json, current, () => describe(current));
    });
  policy
    .command('set')
    .description('replace the policy from a file (YAML or JSON; admin)')
    .requiredOption('-f, --file <file>', 'the policy (`-`: standard input)')
    .option(...JSON_FLAG)
    .action(async (opts: { file: string; json?: boolean }) => {
      const body = checked(WorkspacePolicy, await readDocument(opts.file), opts.file);
      const api = await connect(program);
      const saved = await api.answer(api.http.PUT('/workspaces/current/policy', { body }), WorkspacePolicy);
      print(opts.json, saved, () => describe(saved));
    });
}
