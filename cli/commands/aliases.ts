import type { Command } from 'commander';
import { AliasRollbackRequest, AliasView, SetAliasRequest } from '../../shared/contracts/registry.js';
import { checked, connect, JSON_FLAG, print, listCommand } from '../context.js';

export function registerAliases(program: Command): void {
  const aliases = program.command('aliases').description('names (chat-default) that point at approved model versions');
  listCommand(program, aliases, {
    description: 'list aliases and where they point',
    path: '/aliases',
    item: AliasView,
    header: ['ALIAS', 'MODEL', 'VERSION', 'BY', 'UPDATED'],
    row: (a) => [a.name, a.model, a.version, a.updatedBy, a.updatedAt],
  });
  aliases
    .command('set <alias> <model> <version>')
    .description('point an alias at an approved version (admin; audited with your reason)')
    .requiredOption('--reason <text>', 'why it moves')
    .option(...JSON_FLAG)
    .action(async (alias: string, model: string, version: string, opts: { reason: string; json?: boolean }) => {
      const request = checked(SetAliasRequest, { model, version, reason: opts.reason }, 'alias');
      const api = await connect(program);
      const view = await api.answer(api.http.PUT('/aliases/{alias}', { params: { path: { alias } }, body: request }), AliasView);
      print(opts.json, view, () => `${view.name} -> ${view.model} ${view.version}`);
    });
  aliases
    .command('rollback <alias>')
    .description('move an alias back one step, to the version before its latest move (admin; audited with your reason)')
    .requiredOption('--reason <text>', 'why it moves back')
    .option(...JSON_FLAG)
    .action(async (alias: string, opts: { reason: string; json?: boolean }) => {
      const request = checked(AliasRollbackRequest, { reason: opts.reason }, 'rollback');
      const api = await connect(program);
      const view = await api.answer(api.http.POST('/aliases/{alias}/rollback', { params: { path: { alias } }, body: request }), AliasView);
      print(opts.json, view, () => `${view.name} -> ${view.model} ${view.version} (rolled back)`);
    });
}
