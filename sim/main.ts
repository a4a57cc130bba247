/**
 * The simulator as a program of its own: `node --import tsx sim/main.ts --model m`. Nodes run it as
 * `lunanexa-agent sim-runtime`, which the single-file agent bundle routes to the same CLI.
 */
import { runSimServerCli } from './cli.js';

runSimServerCli(process.argv.slice(2)).catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n`);
  process.exitCode = 2;
});
