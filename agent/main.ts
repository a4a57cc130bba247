import { readFile } from 'node:fs/promises';
import { Command, InvalidArgumentError, Option } from 'commander';
import { runSimServerCli } from '../sim/cli.js';
import { runAgent } from './agent.js';
import { enrollAgent } from './enroll.js';
import { parseAgentEnv, type AgentEnv } from './env.js';
import { jsonLog } from './log.js';
import { DEFAULT_POLICY_PATH } from './policy-file.js';
import { switchToRuntimeIds, takeRunAs } from './runtimes/simulated.js';

/**
 * The enrollment token from a file, standard input or the environment, never from the command line, which
 * every user of the machine can read.
 */
async function enrollmentToken(opts: { token?: string; tokenFile?: string }, env: AgentEnv): Promise<string> {
  if ((opts.token === undefined) === (opts.tokenFile === undefined)) throw new InvalidArgumentError('give exactly one of --token and --token-file');
  if (opts.tokenFile !== undefined) return (await readFile(opts.tokenFile, 'utf8')).trim();
  // argv is readable by every local user (/proc/<pid>/cmdline): a token there is a token leaked.
  if (opts.token !== '-')
    throw new InvalidArgumentError(
      'the enrollment token is not taken on the command line, where every local user can read it: use --token - (LUNANEXA_ENROLLMENT_TOKEN or standard input) or --token-file <path>',
    );
  if (env.LUNANEXA_ENROLLMENT_TOKEN) return env.LUNANEXA_ENROLLMENT_TOKEN;
  let text = '';
  for await (const chunk of process.stdin) text += String(chunk);
  return text.trim();
}

function agentProgram(env: AgentEnv): Command {
  const program = new Command('lunanexa-agent').description('LunaNexa node agent: dials out to the control plane; opens no inbound port');

  program
    .command('enroll')
    .description('enroll this machine with a single-use enrollment token')
    .requiredOption('--url <url>', 'control plane URL')
    .option('--token <->', '- reads the enrollment token from LUNANEXA_ENROLLMENT_TOKEN when set, else from standard input')
    .option('--token-file <path>', 'read the enrollment token from this file')
    .option('--name <name>', 'machine name (defaults to the hostname)')
    .option('--state-dir <dir>', 'where the key and identity are kept', env.LUNANEXA_AGENT_STATE_DIR)
    .action(async (opts: { url: string; token?: string; tokenFile?: string; name?: string; stateDir: string }) => {
      const token = await enrollmentToken(opts, env);
      const identity = await enrollAgent({ url: opts.url, token, name: opts.name, stateDir: opts.stateDir, nvidiaSmi: env.LUNANEXA_AGENT_NVIDIA_SMI });
      jsonLog('enrolled', { machineId: identity.machineId, name: identity.name, stateDir: opts.stateDir });
    });

  program
    .command('run')
    .description('connect to the control plane and supervise runtimes')
    .option('--state-dir <dir>', 'where the key and identity are kept', env.LUNANEXA_AGENT_STATE_DIR)
    .option(
      '--policy <path>',
      `the local policy: what this node runs (default: LUNANEXA_AGENT_POLICY, else ${DEFAULT_POLICY_PATH}; without that file nothing runs)`,
    )
    .option('--stop-runtimes-on-exit', 'stop runtimes when the agent stops (by default they keep running and are re-adopted)')
    .addOption(
      new Option('--uplink <mode>', 'auto: answers go up one long-lived uplink, or per invocation when a proxy buffers it; off: always per invocation')
        .choices(['auto', 'off'])
        .default(env.LUNANEXA_AGENT_UPLINK),
    )
    .action(async (opts: { stateDir: string; policy?: string; stopRuntimesOnExit?: boolean; uplink: 'auto' | 'off' }) => {
      // A file named on purpose must exist; only the default one may be missing (and then nothing runs).
      const named = opts.policy ?? env.LUNANEXA_AGENT_POLICY;
      const policy = named ? { path: named, required: true } : { path: DEFAULT_POLICY_PATH, required: false };
      const agent = await runAgent({
        stateDir: opts.stateDir,
        policy,
        stopRuntimesOnExit: opts.stopRuntimesOnExit,
        uplink: opts.uplink,
        address: env.LUNANEXA_AGENT_ADDRESS,
        nvidiaSmi: env.LUNANEXA_AGENT_NVIDIA_SMI,
        keptWorkerLogs: env.LUNANEXA_AGENT_KEPT_WORKER_LOGS,
        telemetryMs: env.LUNANEXA_AGENT_TELEMETRY_MS,
      });
      // Ctrl-C reaches both the launcher and its agents; a second signal must not cut the orderly stop short.
      const stop = () => void agent.stop();
      process.on('SIGINT', stop);
      process.on('SIGTERM', stop);
      const reason = await agent.done;
      jsonLog('agent stopped', { reason });
      process.exit(reason === 'revoked' ? 3 : 0);
    });
  return program;
}

// The simulated runtime is this same binary, so that the single-file agent bundle can launch it; its flags
// are its own and bypass the agent's parser (and its environment). Started as root, it is given the runtime's ids
// and switches to them here, every module loaded and before it listens.
if (process.argv[2] === 'sim-runtime') {
  const { ids, rest } = takeRunAs(process.argv.slice(3));
  if (ids) switchToRuntimeIds(ids);
  await runSimServerCli(rest);
} else {
  try {
    await agentProgram(parseAgentEnv(process.env)).parseAsync(process.argv);
  } catch (error) {
    jsonLog('fatal', { error: error instanceof Error ? error.message : String(error) });
    process.exit(1);
  }
}
