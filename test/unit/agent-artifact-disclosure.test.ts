import { chmod, mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cacheDirProblem } from '../../agent/artifacts/cache-guard.js';
import { LaunchRefused, localDetail } from '../../agent/runtimes/adapter.js';
import { artifactPath, hashArtifact, resolveRoots } from '../../agent/runtimes/files.js';

/**
 * The agent runs as root and resolves an artifact before it checks the roots: what it reports to the control plane
 * (a replica's message, read by any operator) must not tell the node's file system beyond what the operator named.
 * The node's own log keeps the detail.
 */
const LIMITS = { maxBytes: 1024 ** 3, maxMs: 60_000 };
const uri = (path: string) => pathToFileURL(path).href;

let dir: string;
let root: string;
let secret: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'lnx-disclose-'));
  root = join(dir, 'models');
  await mkdir(root);
  secret = join(dir, 'private', 'machine-key.jwk');
  await mkdir(join(dir, 'private'));
  await writeFile(secret, '{}');
  await symlink(secret, join(root, 'keylink'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function refusal(work: Promise<unknown>): Promise<Error> {
  const error = await work.then(
    () => null,
    (e: unknown) => e as Error,
  );
  expect(error).toBeInstanceOf(Error);
  return error!;
}

describe('artifact refusals reported to the control plane', () => {
  it('name no target of a symbolic link that leads out of the roots; the local detail does', async () => {
    const roots = await resolveRoots([root]);
    const error = await refusal(hashArtifact(uri(join(root, 'keylink')), roots, LIMITS));
    expect(error).toBeInstanceOf(LaunchRefused);
    expect(error.message).not.toContain(secret);
    expect(error.message).not.toContain('private');
    expect(localDetail(error)).toContain(secret);
  });

  it('answer alike for a file outside the roots that exists and one that does not (no existence oracle)', async () => {
    const roots = await resolveRoots([root]);
    const exists = await refusal(artifactPath(uri(secret), roots));
    const missing = await refusal(artifactPath(uri(join(dir, 'private', 'id_rsa')), roots));
    expect(exists).toBeInstanceOf(LaunchRefused);
    expect(missing).toBeInstanceOf(LaunchRefused);
    expect(missing.message.replace('id_rsa', 'machine-key.jwk')).toBe(exists.message);
    expect(missing.message).not.toMatch(/ENOENT|realpath/);
    expect(exists.message).toBe(`refused by local policy: artifact ${uri(secret)} is not a file inside the allowed artifact roots`);
  });

  it('tell a missing file inside a root, relative to it', async () => {
    const roots = await resolveRoots([root]);
    const error = await refusal(artifactPath(uri(join(root, 'sub', 'missing.gguf')), roots));
    expect(error).not.toBeInstanceOf(LaunchRefused);
    expect(error.message).toBe(`artifact ${uri(join(root, 'sub', 'missing.gguf'))} cannot be resolved: sub/missing.gguf does not exist in its artifact root`);
  });
});

describe('model cache refusals reported to the control plane', () => {
  it('name a folder above the cache by the path the policy gives, never where a link in it really leads', async () => {
    // The configured cache dir is reached through a link; a folder above where it really lies is open to others.
    const hidden = join(dir, 'hidden-real', 'open');
    await mkdir(join(hidden, 'cache'), { recursive: true, mode: 0o755 });
    await chmod(hidden, 0o777);
    await mkdir(join(dir, 'policy'), { mode: 0o755 });
    await symlink(join(hidden, 'cache'), join(dir, 'policy', 'cache'));
    const configured = join(dir, 'policy', 'cache');
    const problem = await cacheDirProblem(configured, []);
    expect(problem).toBe(
      `a folder above where the model cache ${configured} really lies is writable by its group or others without the sticky bit (mode 0777)`,
    );
    expect(problem).not.toContain('hidden-real');
  });
});
