import type { Command } from 'commander';
import { EnrollmentTokenCreated } from '../../shared/contracts/enrollment.js';
import { connect, JSON_FLAG, keyValues, print } from '../context.js';

export function registerEnrollTokens(program: Command): void {
  program
    .command('enroll-tokens')
    .description('single-use tokens that enroll a new machine')
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
          `expires: ${created.expiresAt}`,
          '',
          'It is shown once. On the machine: LUNANEXA_ENROLLMENT_TOKEN=<token> npx lunanexa-agent enroll --url <control plane> --token -',
        ].join('\n'),
      );
    });
}
