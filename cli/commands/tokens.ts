import type { Command } from 'commander';
import { Role } from '../../shared/contracts/common.js';
import { ApiTokenCreated, ApiTokenView, CreateApiTokenRequest } from '../../shared/contracts/tokens.js';
import { checked, connect, JSON_FLAG, print, listCommand } from '../context.js';

const limits = (t: ApiTokenView) =>
  [t.models ? `models: ${t.models.join(',')}` : '', t.rateLimitPerMinute ? `${t.rateLimitPerMinute}/min` : ''].filter(Boolean).join(' ') || '-';

export function registerTokens(program: Command): void {
  const tokens = program.command('tokens').description('API tokens of this workspace (admin)');
  listCommand(program, tokens, {
    description: 'list tokens: role, state, limits, expiry (never their secrets)',
    path: '/tokens',
    item: ApiTokenView,
    header: ['NAME', 'ROLE', 'STATE', 'MEMBER', 'LIMITS', 'EXPIRES', 'ID'],
    row: (t) => [t.name, t.role, t.state, t.member?.name ?? '-', limits(t), t.expiresAt ?? 'never', t.id],
  });
  tokens
    .command('create <name>')
    .description('create a token; its secret is printed once')
    .requiredOption('--role <role>', `one of ${Role.options.join(', ')}`)
    .option('--ttl <seconds>', 'seconds until it expires (default: never)')
    .option('--member <id>', 'the member it is issued to (its role may not exceed theirs)')
    .option('--model <name...>', 'inference tokens: the models it may call (default: every model)')
    .option('--rate-limit <perMinute>', 'inference tokens: requests per minute across the control plane')
    .option(...JSON_FLAG)
    .action(async (name: string, opts: { role: string; ttl?: string; member?: string; model?: string[]; rateLimit?: string; json?: boolean }) => {
      const request = checked(
        CreateApiTokenRequest,
        {
          name,
          role: opts.role,
          ...(opts.ttl !== undefined ? { ttlSeconds: Number(opts.ttl) } : {}),
          ...(opts.member ? { memberId: opts.member } : {}),
          ...(opts.model ? { models: opts.model } : {}),
          ...(opts.rateLimit !== undefined ? { rateLimitPerMinute: Number(opts.rateLimit) } : {}),
        },
        'the token',
      );
      const api = await connect(program);
      const created = await api.answer(api.http.POST('/tokens', { body: request }), ApiTokenCreated);
      print(opts.json, created, () =>
        [
          `token: ${created.token}`,
          `id:    ${created.id} (${created.role}, expires ${created.expiresAt ?? 'never'})`,
          '',
          'It is shown once: store it now.',
        ].join('\n'),
      );
    });
  tokens
    .command('revoke <id>')
    .description('revoke a token: it stops working at once on every instance, and its console sessions end')
    .option(...JSON_FLAG)
    .action(async (id: string, opts: { json?: boolean }) => {
      const api = await connect(program);
      const revoked = await api.answer(api.http.DELETE('/tokens/{id}', { params: { path: { id } } }), ApiTokenView);
      print(opts.json, revoked, () => `${revoked.name} (${revoked.id}): revoked at ${revoked.revokedAt}`);
    });
}
