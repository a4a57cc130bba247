import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';

/** `npx lunanexa`'s own entry: the bin, which runs the CLI's TypeScript through tsx. */
export const CLI_BIN = fileURLToPath(new URL('../../bin/lunanexa.mjs', import.meta.url));
const CLI_MAIN = fileURLToPath(new URL('../../cli/main.ts', import.meta.url));

export type CliRun = { code: number; stdout: string; stderr: string };

/**
 * The CLI bundled from the current sources into `dir`, once per suite. Each run is still a process of its own, as
 * an operator's is; without tsx's loader and its per-module hooks a run starts in a fraction of the time, which on
 * two cores is most of what a CLI suite costs. The bin itself (the same code through tsx) is run by `CLI_BIN`.
 */
export async function buildCli(dir: string): Promise<string> {
  const outfile = join(dir, 'lunanexa.mjs');
  await esbuild.build({
    entryPoints: [CLI_MAIN],
    outfile,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    // CommonJS dependencies (commander) require Node built-ins, which ESM output has no `require` for.
    banner: { js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);" },
    logLevel: 'silent',
  });
  return outfile;
}

/** Runs the CLI at `entry` with `args`; never throws, so that exit codes can be checked. */
export function runCli(entry: string, args: string[], env: Record<string, string | undefined>, stdin = ''): Promise<CliRun> {
  return new Promise((resolve) => {
    const child = execFile(process.execPath, [entry, ...args], { env: { PATH: process.env.PATH, ...env }, timeout: 120_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, stdout, stderr });
    });
    child.stdin?.end(stdin);
  });
}
