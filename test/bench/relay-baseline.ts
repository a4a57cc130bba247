import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdtemp, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import type { Bundles } from './relay-lunanexa.js';

const run = promisify(execFile);
const REPO = fileURLToPath(new URL('../..', import.meta.url));
const git = async (...args: string[]) => (await run('git', args, { cwd: REPO })).stdout.trim();

/** The commit a revision names, and its short hash for labels. */
export async function resolveRevision(revision: string): Promise<{ commit: string; short: string }> {
  const commit = await git('rev-parse', '--verify', `${revision}^{commit}`);
  return { commit, short: await git('rev-parse', '--short', commit) };
}

/**
 * Checks `commit` out in a detached worktree in a new temporary folder, with this checkout's node_modules linked in.
 * The folder is readable by all: the agent runs its simulated runtimes (its own bundle) as `nobody`.
 */
export async function checkOut(commit: string): Promise<{ dir: string; remove: () => Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'lnx-bench-before-'));
  await chmod(dir, 0o755);
  const remove = async () => {
    await git('worktree', 'remove', '--force', dir).catch(async () => {
      await rm(dir, { recursive: true, force: true });
      await git('worktree', 'prune');
    });
  };
  try {
    await git('worktree', 'add', '--detach', dir, commit);
    await symlink(join(REPO, 'node_modules'), join(dir, 'node_modules'), 'dir');
  } catch (error) {
    await remove();
    throw error;
  }
  return { dir, remove };
}

/** Where older trees keep the simulated nodes' policy writer (the tree was laid out again in between). */
const POLICY_WRITERS = ['functions/hosts/dev/fleet.ts', 'functions/dev/fleet.ts'];

/**
 * The control-plane and agent bundles of the worktree at `dir`, built by its own scripts/build.mjs in a child
 * process (into its own output folder), and its own way of writing a simulated node's policy, run the same way:
 * the old code never enters this process.
 */
export async function buildIn(dir: string): Promise<Bundles> {
  const script = [
    `const { build } = await import(${JSON.stringify(pathToFileURL(join(dir, 'scripts/build.mjs')).href)});`,
    "const out = await build({ only: ['control-plane', 'agent'] });",
    "console.log(JSON.stringify({ controlPlane: out['control-plane'].path, agent: out.agent.path }));",
  ].join('\n');
  const { stdout } = await run(process.execPath, ['--input-type=module', '-e', script], { cwd: dir });
  const built = JSON.parse(stdout.trim().split('\n').at(-1)!) as Omit<Bundles, 'writePolicy'>;
  const writer = POLICY_WRITERS.map((path) => join(dir, path)).find((path) => existsSync(path));
  if (!writer) throw new Error(`no simulated-node policy writer in ${dir} (looked for ${POLICY_WRITERS.join(', ')})`);
  const writePolicy = async (stateDir: string) => {
    const write = `const { writeSimPolicy } = await import(${JSON.stringify(pathToFileURL(writer).href)}); console.log(await writeSimPolicy(${JSON.stringify(stateDir)}));`;
    const { stdout: written } = await run(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', write], { cwd: dir });
    return written.trim().split('\n').at(-1)!;
  };
  return { ...built, writePolicy };
}
