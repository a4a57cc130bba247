import { execFile } from 'node:child_process';
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

/**
 * The control-plane and agent bundles of the worktree at `dir`, built by its own scripts/build.mjs in a child
 * process (into its own output folder): the old code never enters this process.
 */
export async function buildIn(dir: string): Promise<Bundles> {
  const script = [
    `const { build } = await import(${JSON.stringify(pathToFileURL(join(dir, 'scripts/build.mjs')).href)});`,
    "const out = await build({ only: ['control-plane', 'agent'] });",
    "console.log(JSON.stringify({ controlPlane: out['control-plane'].path, agent: out.agent.path }));",
  ].join('\n');
  const { stdout } = await run(process.execPath, ['--input-type=module', '-e', script], { cwd: dir });
  return JSON.parse(stdout.trim().split('\n').at(-1)!) as Bundles;
}
