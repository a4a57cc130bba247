import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmod, chown, link, lstat, mkdir, mkdtemp, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent } from 'undici';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ArtifactCache } from '../../agent/artifacts/cache.js';
import type { VersionArtifact } from '../../shared/contracts/artifacts.js';

/**
 * The agent runs as root and its model cache may be reachable by others (the second security review's M6): a
 * symbolic or hard link planted in `partial/` or `blobs/` must never make the agent create, truncate, append to,
 * chmod or copy a file elsewhere, and a cache dir (or a folder of it, or one above it) that anyone but the agent
 * can write is refused before anything is written.
 */

const root = process.getuid?.() === 0;
const me = process.getuid?.() ?? 0;

let server: Server;
let base: string;
const files = new Map<string, Buffer>();
const requests: string[] = [];
let dir: string;
let dispatcher: Agent;

const sha256 = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');

function publish(versionId: string, path: string, bytes: Buffer): VersionArtifact {
  files.set(`${versionId}/${path}`, bytes);
  return {
    versionId,
    model: 'm',
    version: versionId,
    totalBytes: bytes.length,
    files: [{ path, size: bytes.length, sha256: sha256(bytes), url: `${base}/${versionId}/${path}?sig=SECRET` }],
    urlsExpireAt: Math.floor(Date.now() / 1000) + 3600,
  };
}

const cache = (cacheDir = join(dir, 'cache')) =>
  new ArtifactCache({ dir: cacheDir, maxBytes: 64 * 1024 ** 2, stallMs: 5_000, inUse: () => [], dispatcher, log: () => {} });
const never = () => new AbortController().signal;
const refusal = (promise: Promise<unknown>) =>
  promise.then(
    () => null,
    (error: Error) => error.message,
  );
const exists = (path: string) =>
  lstat(path).then(
    () => true,
    () => false,
  );

const PAYLOAD = Buffer.from('root-written-by-agent: attacker-chosen bytes\n');

beforeAll(async () => {
  server = createServer((req, res) => {
    const path = new URL(req.url ?? '/', 'http://x').pathname.slice(1);
    requests.push(path);
    const file = files.get(path);
    if (!file) return void res.writeHead(404).end();
    const range = /^bytes=(\d+)-$/.exec(req.headers.range ?? '');
    const start = range ? Number(range[1]) : 0;
    res.writeHead(range ? 206 : 200, range ? { 'content-range': `bytes ${start}-${file.length - 1}/${file.length}` } : {});
    res.end(file.subarray(start));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  base = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
  dispatcher = new Agent();
});
afterAll(async () => {
  await dispatcher.close();
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'lnx-cache-links-'));
  await mkdir(join(dir, 'victim'), { mode: 0o755 });
  requests.length = 0;
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** A cache whose `partial/` (or `blobs/`) already holds what someone planted there. */
async function planted(folder: 'partial' | 'blobs', name: string, plant: (path: string) => Promise<void>): Promise<string> {
  await mkdir(join(dir, 'cache', folder), { recursive: true, mode: 0o755 });
  const path = join(dir, 'cache', folder, name);
  await plant(path);
  return path;
}

describe('links planted in the cache', () => {
  it('a symbolic link at partial/<sha256> does not make the agent create the file it points to', async () => {
    const version = publish('mv_evil', 'payload.bin', PAYLOAD);
    const victim = join(dir, 'victim', 'written-as-root');
    const path = await planted('partial', sha256(PAYLOAD), (p) => symlink(victim, p));
    const message = await refusal(cache().ensure(version, never()));
    expect(message).toBe(`the model cache's ${path} is a symbolic link, not a file the agent wrote: refused; remove it`);
    expect(await exists(victim)).toBe(false);
    expect(await exists(join(dir, 'cache', 'blobs', sha256(PAYLOAD)))).toBe(false);
  });

  it('a symbolic link at partial/<sha256> does not make the agent append to or chmod the file it points to', async () => {
    const version = publish('mv_append', 'payload.bin', PAYLOAD);
    const victim = join(dir, 'victim', 'passwd');
    await writeFile(victim, 'root:x:0:0\n', { mode: 0o644 });
    await planted('partial', sha256(PAYLOAD), (p) => symlink(victim, p));
    expect(await refusal(cache().ensure(version, never()))).toMatch(/is a symbolic link, not a file the agent wrote: refused/);
    expect(await readFile(victim, 'utf8')).toBe('root:x:0:0\n');
    expect((await stat(victim)).mode & 0o777).toBe(0o644);
  });

  it('a hard link at partial/<sha256> does not make the agent append to, truncate or chmod the file it shares', async () => {
    const version = publish('mv_hard', 'payload.bin', PAYLOAD);
    const victim = join(dir, 'victim', 'shadow');
    await writeFile(victim, 'root:secret\n', { mode: 0o600 });
    const path = await planted('partial', sha256(PAYLOAD), (p) => link(victim, p));
    expect(await refusal(cache().ensure(version, never()))).toBe(`the model cache's ${path} has 2 links, not a file the agent wrote: refused; remove it`);
    expect(await readFile(victim, 'utf8')).toBe('root:secret\n');
    expect((await stat(victim)).mode & 0o777).toBe(0o600);
  });

  it('a symbolic link at blobs/<sha256> is not linked or copied into a version folder', async () => {
    const secret = Buffer.from('x'.repeat(PAYLOAD.length));
    const version = publish('mv_blob', 'payload.bin', PAYLOAD);
    const victim = join(dir, 'victim', 'secret');
    await writeFile(victim, secret, { mode: 0o600 });
    const path = await planted('blobs', sha256(PAYLOAD), (p) => symlink(victim, p));
    expect(await refusal(cache().ensure(version, never()))).toBe(
      `the model cache's ${path} is a symbolic link, not a file the agent wrote: refused; remove it`,
    );
    expect(await exists(join(dir, 'cache', 'versions', 'mv_blob'))).toBe(false);
  });

  it('a symbolic link at versions/<id> is not taken for a laid-out version', async () => {
    const version = publish('mv_folder', 'payload.bin', PAYLOAD);
    const ok = cache();
    await ok.ensure(version, never());
    const elsewhere = join(dir, 'victim', 'folder');
    await mkdir(elsewhere);
    await writeFile(join(elsewhere, 'payload.bin'), 'y'.repeat(PAYLOAD.length));
    await rm(join(dir, 'cache', 'versions', 'mv_folder'), { recursive: true });
    await symlink(elsewhere, join(dir, 'cache', 'versions', 'mv_folder'));
    // Laid out again: the link itself replaced, nothing written where it pointed.
    expect(await cache().ensure(version, never())).toBe(join(dir, 'cache', 'versions', 'mv_folder'));
    expect((await lstat(join(dir, 'cache', 'versions', 'mv_folder'))).isDirectory()).toBe(true);
    expect(await readFile(join(dir, 'cache', 'versions', 'mv_folder', 'payload.bin'))).toEqual(PAYLOAD);
    expect(await readFile(join(elsewhere, 'payload.bin'), 'utf8')).toBe('y'.repeat(PAYLOAD.length));
  });
});

describe('who may write the cache dir', () => {
  it('refuses a cache dir writable by others, before any request', async () => {
    await mkdir(join(dir, 'cache'), { mode: 0o755 });
    await chmod(join(dir, 'cache'), 0o777);
    const message = await refusal(cache().ensure(publish('mv_open', 'payload.bin', PAYLOAD), never()));
    expect(message).toBe(
      `the model cache ${join(dir, 'cache')} is writable by its group or others (mode 0777): the cache dir and its folders must be writable by the agent alone`,
    );
    expect(requests).toEqual([]);
  });

  it('refuses a partial/ folder writable by its group, and a partial/ that is a symbolic link', async () => {
    await mkdir(join(dir, 'cache', 'partial'), { recursive: true, mode: 0o755 });
    await chmod(join(dir, 'cache', 'partial'), 0o775);
    expect(await refusal(cache().ensure(publish('mv_group', 'payload.bin', PAYLOAD), never()))).toBe(
      `the model cache ${join(dir, 'cache', 'partial')} is writable by its group or others (mode 0775): the cache dir and its folders must be writable by the agent alone`,
    );
    await rm(join(dir, 'cache', 'partial'), { recursive: true });
    await symlink(join(dir, 'victim'), join(dir, 'cache', 'partial'));
    expect(await refusal(cache().ensure(publish('mv_group', 'payload.bin', PAYLOAD), never()))).toBe(
      `the model cache ${join(dir, 'cache', 'partial')} is a symbolic link: the cache dir and its folders must be the agent's own`,
    );
    expect(requests).toEqual([]);
  });

  it('refuses a cache dir below a folder that others can write (one they could swap it out of)', async () => {
    await mkdir(join(dir, 'open'), { mode: 0o755 });
    await chmod(join(dir, 'open'), 0o777);
    expect(await refusal(cache(join(dir, 'open', 'cache')).ensure(publish('mv_above', 'payload.bin', PAYLOAD), never()))).toBe(
      `${join(dir, 'open')}, above the model cache ${join(dir, 'open', 'cache')}, is writable by its group or others without the sticky bit (mode 0777)`,
    );
    // The sticky bit (as on /tmp) keeps others from renaming what is not theirs.
    await chmod(join(dir, 'open'), 0o1777);
    expect(await cache(join(dir, 'open', 'cache')).ensure(publish('mv_above', 'payload.bin', PAYLOAD), never())).toBe(
      join(dir, 'open', 'cache', 'versions', 'mv_above'),
    );
  });

  it.runIf(root)('refuses a cache dir that belongs to the runtime user (the review: `install -d -o nobody`)', async () => {
    const nobody = Number(execFileSync('id', ['-u', 'nobody'], { encoding: 'utf8' }).trim());
    await chmod(dir, 0o755);
    await mkdir(join(dir, 'cache'), { mode: 0o755 });
    await chown(join(dir, 'cache'), nobody, nobody);
    expect(await refusal(cache().ensure(publish('mv_nobody', 'payload.bin', PAYLOAD), never()))).toBe(
      `the model cache ${join(dir, 'cache')} belongs to uid ${nobody}, not to the agent (uid ${me}): the cache dir and its folders must be the agent's own`,
    );
    expect(requests).toEqual([]);
  });

  it.runIf(root)('refuses a partial download that belongs to someone else', async () => {
    const nobody = Number(execFileSync('id', ['-u', 'nobody'], { encoding: 'utf8' }).trim());
    const version = publish('mv_theirs', 'payload.bin', PAYLOAD);
    const path = await planted('partial', sha256(PAYLOAD), async (p) => {
      await writeFile(p, PAYLOAD.subarray(0, 10));
      await chown(p, nobody, nobody);
    });
    expect(await refusal(cache().ensure(version, never()))).toBe(
      `the model cache's ${path} belongs to uid ${nobody}, not a file the agent wrote: refused; remove it`,
    );
  });
});

describe('the cache index', () => {
  it('is never read or written through a symbolic link', async () => {
    const victim = join(dir, 'victim', 'index-target');
    await writeFile(victim, '{"not":"an index"}', { mode: 0o600 });
    await mkdir(join(dir, 'cache'), { mode: 0o755 });
    await symlink(victim, join(dir, 'cache', 'index.json'));
    expect(await cache().ensure(publish('mv_index', 'payload.bin', PAYLOAD), never())).toBe(join(dir, 'cache', 'versions', 'mv_index'));
    expect(await readFile(victim, 'utf8')).toBe('{"not":"an index"}');
    expect((await lstat(join(dir, 'cache', 'index.json'))).isFile()).toBe(true);
  });
});
