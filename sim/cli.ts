import { parseSimArgs } from './args.js';
import type { SimServerHandle } from './options.js';
import { startSimServer } from './server.js';

/**
 * Command-line entry: parses flags, starts the server, prints one
 * `{"event":"listening","port":N}` line to stdout for the supervising agent, and closes
 * gracefully on SIGTERM/SIGINT (a second signal falls through to the default and kills). A
 * `LUNANEXA_RUNTIME_TOKEN` in its environment (the agent sets one at every launch) is the bearer token every
 * call must carry.
 */
export async function runSimServerCli(argv: string[], env: NodeJS.ProcessEnv = process.env): Promise<SimServerHandle> {
  const opts = parseSimArgs(argv);
  const token = env.LUNANEXA_RUNTIME_TOKEN;
  const handle = await startSimServer(token ? { ...opts, token } : opts);
  const onSignal = (): void => {
    process.off('SIGTERM', onSignal);
    process.off('SIGINT', onSignal);
    void handle.close();
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  process.stdout.write(`${JSON.stringify({ event: 'listening', port: handle.port })}\n`);
  return handle;
}
