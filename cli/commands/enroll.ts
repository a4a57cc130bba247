import type { Command } from 'commander';
import { EnrollmentTokenCreated, EnrollmentTokenView } from '../../shared/contracts/enrollment.js';
import { connect, JSON_FLAG, keyValues, listCommand, print } from '../context.js';

const labelsOf = (labels: Record<string, string>) =>
  Object.entries(labels)
    .map(([k, v]) => `${k}=${v}`)
    .join(',') || '-';

export function registerEnrollTokens(program: Command): void {
  const tokens = program.command('enroll-tokens').description('single-use tokens that enroll a new machine (admin)');
  tokens
    .command('create')
    .description('create an enrollment token (shown once) for `lunanexa-agent enroll`')
    .option('--name <machine>', 'only an agent enrolling under this name may use it')
    .option('--label <key=value...>', 'labels the machine gets')
    .option('--ttl <seconds>', 'seconds until it expires', '900')
    .option(...JSON_FLAG)
    .action(async (opts: { name?: string; label?: string[]; ttl: string; json?: boolean }) => {
      const labels = keyValues('--label', opts.label, (value) => value);
      const body = { ...(opts.name ? { name: opts.name } : {}), labels, ttlSeconds: Number(opts.ttl) };
      const api = await connect(program);
      const created = await api.answer(api.http.POST('/enrollment-tokens', { body }), EnrollmentTokenCreated);
      print(opts.json, created, () =>
        [
          `token:   ${created.token}`,
          `id:      ${created.id}`,
          `expires: ${created.expiresAt}`,
          '',
          'It is shown once. On the machine: LUNANEXA_ENROLLMENT_TOKEN=<token> npx lunanexa-agent enroll --url <control plane> --token -',
          `A token that leaked before it was used: lunanexa enroll-tokens revoke ${created.id}`,
        ].join('\n'),
      );
    });
  listCommand(program, tokens, {
    description: 'list enrollment tokens: bound name, labels, state, expiry, the machine each enrolled (never their secrets)',
    path: '/enrollment-tokens',
    item: EnrollmentTokenView,
    header: ['ID', 'NAME', 'LABELS', 'STATE', 'EXPIRES', 'MACHINE'],
    row: (t) => [t.id, t.name ?? '(any)', labelsOf(t.labels), t.state, t.expiresAt, t.machineId ?? '-'],
  });
  tokens
    .command('revoke <id>')
    .description('revoke an unused enrollment token: it enrolls no machine from then on')
    .option(...JSON_FLAG)
    .action(async (id: string, opts: { json?: boolean }) => {
      const api = await connect(program);
      const revoked = await api.answer(api.http.DELETE('/enrollment-tokens/{id}', { params: { path: { id } } }), EnrollmentTokenView);
      print(opts.json, revoked, () => `${revoked.id}${revoked.name ? ` (${revoked.name})` : ''}: revoked at ${revoked.revokedAt}`);
    });
}
