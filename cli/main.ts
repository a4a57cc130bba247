import { Command, CommanderError } from 'commander';
import { CliError } from './client.js';
import { registerMachines } from './commands/machines.js';
import { registerDeployments } from './commands/deployments.js';
import { registerLogs } from './commands/logs.js';
import { registerEnrollTokens } from './commands/enroll.js';
import { registerSession } from './commands/session.js';
import { registerTokens } from './commands/tokens.js';
import { registerUsage } from './commands/usage.js';
import { registerAudit } from './commands/audit.js';
import { registerModels } from './commands/models.js';
import { registerAliases } from './commands/aliases.js';
import { registerPolicy } from './commands/policy.js';
import { registerRuns } from './commands/runs.js';
import { registerJobs } from './commands/jobs.js';
import { registerSwarms } from './commands/swarms.js';

/**
 * `lunanexa`, the operator's CLI over the management API (docs/cli.md). Tables for people, `--json` for scripts,
 * progress on stderr while it waits. Exit codes: 0 done, 1 the API refused or could not be reached, 2 the command
 * was wrong or not configured, 3 a wait ran out of time, 4 a verification found a problem.
 */
const program = new Command('lunanexa')
  .description('LunaNexa control plane CLI (management API)')
  .option('--url <url>', 'control plane URL (default: LUNANEXA_URL, else the saved login)')
  .exitOverride();

registerSession(program);
registerMachines(program);
registerDeployments(program);
registerRuns(program);
registerJobs(program);
registerSwarms(program);
registerLogs(program);
registerEnrollTokens(program);
registerTokens(program);
registerUsage(program);
registerAudit(program);
registerModels(program);
registerAliases(program);
registerPolicy(program);

try {
  await program.parseAsync(process.argv);
} catch (error) {
  if (error instanceof CliError) {
    console.error(`lunanexa: ${error.message}`);
    process.exitCode = error.exitCode;
  } else if (error instanceof CommanderError) {
    // Help and version end here too, with code 0; commander has already printed what it had to say.
    process.exitCode = error.exitCode === 0 ? 0 : 2;
  } else {
    throw error;
  }
}
