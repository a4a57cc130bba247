import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmod, chown, mkdir, mkdtemp, readFile, rm, stat, symlink, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LaunchRefused } from '../../agent/runtimes/adapter.js';
import { artifactPath, executableDigest, hashArtifact, resolveRoots } from '../../agent/runtimes/files.js';
import { inUidRange } from '../../agent/runtime-user.js';
import { secureStateDir } from '../../agent/state.js';

const sha256 = (data: string | Buffer) => createHash('sha256').update(data).digest('hex');
const LIMITS = { maxBytes: 1024 ** 3, maxMs: 60_000 };

let dir: string;
let root: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'lnx-files-'));
  root = join(dir, 'models');
  await mkdir(root);
  await writeFile(join(root, 'm.gguf'), 'weights');
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('executable digests', () => {
  it('hash the file on disk, through its symbolic links (as exec follows them)', async () => {
    const cat = await readFile('/bin/cat');
    expect(await executableDigest('/bin/cat')).toBe(sha256(cat));
    expect(await executableDigest(process.execPath)).toBe(sha256(await readFile(process.execPath)));
  });

  it('refuse what is not a regular file', async () => {
    await expect(executableDigest('/dev/zero')).rejects.toThrow(LaunchRefused);
    await expect(executableDigest('/dev/zero')).rejects.toThrow('refused by local policy: /dev/zero is not a regular file');
    await expect(executableDigest(dir)).rejects.toThrow(/not a regular file/);
  });
});

describe('artifacts', () => {
  const uri = (path: string) => pathToFileURL(path).href;

  it('resolve inside an allowed root and hash within the limits', async () => {
    const roots = await resolveRoots([root]);
    expect(await artifactPath(uri(join(root, 'm.gguf')), roots)).toBe(join(roots[0]!, 'm.gguf'));
    expect(await hashArtifact(uri(join(root, 'm.gguf')), roots, LIMITS)).toEqual({ path: join(roots[0]!, 'm.gguf'), sha256: sha256('weights') });
  });

  it('are refused outside every root: /etc/shadow, and a path that climbs out with ..', async () => {
    const roots = await resolveRoots([root]);
    await expect(hashArtifact('file:///etc/shadow', roots, LIMITS)).rejects.toThrow(
      'refused by local policy: artifact file:///etc/shadow is not a file inside the allowed artifact roots',
    );
    await expect(hashArtifact(`file://${root}/../../../etc/passwd`, roots, LIMITS)).rejects.toThrow(/is not a file inside the allowed artifact roots/);
  });

  it('are refused through a symbolic link that leads out of the root', async () => {
    await symlink('/etc/shadow', join(root, 'shadow.gguf'));
    await symlink('/dev/zero', join(root, 'zero.gguf'));
    await symlink('/etc', join(root, 'etc'));
    const roots = await resolveRoots([root]);
    await expect(hashArtifact(uri(join(root, 'shadow.gguf')), roots, LIMITS)).rejects.toThrow(/is not a file inside the allowed artifact roots/);
    await expect(hashArtifact(uri(join(root, 'zero.gguf')), roots, LIMITS)).rejects.toThrow(/is not a file inside the allowed artifact roots/);
    await expect(hashArtifact(uri(join(root, 'etc', 'passwd')), roots, LIMITS)).rejects.toThrow(/is not a file inside the allowed artifact roots/);
  });

  it('follow a link that stays inside, and a root that is itself a link', async () => {
    await symlink(join(root, 'm.gguf'), join(root, 'latest.gguf'));
    await symlink(root, join(dir, 'models-link'));
    const roots = await resolveRoots([join(dir, 'models-link'), join(dir, 'no-such-root')]);
    expect(roots).toEqual(await resolveRoots([root]));
    expect((await hashArtifact(uri(join(root, 'latest.gguf')), roots, LIMITS)).sha256).toBe(sha256('weights'));
  });

  it('are refused when they are no regular file, even inside a root (/dev/zero under a root of /dev)', async () => {
    await expect(hashArtifact('file:///dev/zero', ['/dev'], LIMITS)).rejects.toThrow(
      'refused by local policy: artifact file:///dev/zero is not a regular file',
    );
    execFileSync('mkfifo', [join(root, 'fifo.gguf')]);
    // A FIFO would block an open that waits for a writer: the open does not wait, and the file is refused.
    await expect(hashArtifact(uri(join(root, 'fifo.gguf')), await resolveRoots([root]), LIMITS)).rejects.toThrow(/is not a regular file/);
  });

  it('are read only up to maxBytes', async () => {
    const roots = await resolveRoots([root]);
    await expect(hashArtifact(uri(join(root, 'm.gguf')), roots, { maxBytes: 6, maxMs: 60_000 })).rejects.toThrow(
      /^refused by local policy: artifact file:\/\/.*m\.gguf is 7 bytes, more than the 6 this agent reads$/,
    );
    expect((await hashArtifact(uri(join(root, 'm.gguf')), roots, { maxBytes: 7, maxMs: 60_000 })).sha256).toBe(sha256('weights'));
  });

  it('are read only for maxMs, and no longer than the launch that asked', async () => {
    // Sparse: 512 MiB to read, none of it on disk.
    const big = join(root, 'big.gguf');
    await writeFile(big, '');
    await truncate(big, 512 * 1024 ** 2);
    const roots = await resolveRoots([root]);
    await expect(hashArtifact(uri(big), roots, { maxBytes: 1024 ** 3, maxMs: 5 })).rejects.toThrow(/took longer than 0.005 s/);
    const aborted = AbortSignal.abort(new Error('launch aborted'));
    await expect(hashArtifact(uri(big), roots, LIMITS, aborted)).rejects.toThrow('launch aborted');
  });

  it('are refused when they cannot be resolved', async () => {
    await expect(hashArtifact(uri(join(root, 'missing.gguf')), await resolveRoots([root]), LIMITS)).rejects.toThrow(/cannot be resolved/);
  });
});

describe('secureStateDir', () => {
  const NO_RUNTIME_USER = { runtimeUid: () => false, group: null };

  it('makes a loosened state dir private again and says what it changed', async () => {
    const state = join(dir, 'state');
    await mkdir(join(state, 'runtimes'), { recursive: true });
    await chmod(state, 0o755);
    await chmod(join(state, 'runtimes'), 0o777);
    await writeFile(join(state, 'machine-key.jwk'), '{}', { mode: 0o644 });
    await writeFile(join(state, 'identity.json'), '{}', { mode: 0o600 });
    expect(await secureStateDir(state, NO_RUNTIME_USER)).toEqual([state, join(state, 'runtimes'), join(state, 'machine-key.jwk')]);
    expect((await stat(state)).mode & 0o777).toBe(0o700);
    expect((await stat(join(state, 'runtimes'))).mode & 0o777).toBe(0o700);
    expect((await stat(join(state, 'machine-key.jwk'))).mode & 0o777).toBe(0o600);
    expect(await secureStateDir(state, NO_RUNTIME_USER)).toEqual([]);
  });

  it('refuses a state dir the runtime user owns, and a key that is a symbolic link', async () => {
    const state = join(dir, 'state-owned');
    await mkdir(state, { mode: 0o700 });
    const uid = (await stat(state)).uid;
    await expect(secureStateDir(state, { runtimeUid: (id) => id === uid, group: null })).rejects.toThrow(/belongs to a runtime user/);
    await symlink('/etc/passwd', join(state, 'machine-key.jwk'));
    await expect(secureStateDir(state, NO_RUNTIME_USER)).rejects.toThrow(/machine-key\.jwk is a symbolic link/);
  });

  it.runIf(process.getuid?.() === 0)(
    "with runtimes' own uids, lets their group pass through it to their homes (0710), and refuses an entry a uid of the range owns",
    async () => {
      const state = join(dir, 'state-range');
      await mkdir(join(state, 'runtimes'), { recursive: true, mode: 0o700 });
      await chmod(state, 0o700);
      const range = { first: 2_140_000_000, count: 4 };
      const access = { runtimeUid: (uid: number) => inUidRange(range, uid), group: range.first };
      expect(await secureStateDir(state, access)).toEqual([state, join(state, 'homes')]);
      for (const path of [state, join(state, 'homes')]) {
        const info = await stat(path);
        expect({ path, mode: info.mode & 0o777, gid: info.gid }).toEqual({ path, mode: 0o710, gid: range.first });
      }
      expect((await stat(join(state, 'runtimes'))).mode & 0o777).toBe(0o700);
      expect(await secureStateDir(state, access)).toEqual([]);
      await chown(join(state, 'runtimes'), range.first + 3, range.first);
      await expect(secureStateDir(state, access)).rejects.toThrow(`${join(state, 'runtimes')} belongs to a runtime user (uid ${range.first + 3})`);
    },
  );
});
