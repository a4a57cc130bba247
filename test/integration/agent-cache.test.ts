import { createHash, randomBytes, randomInt } from 'node:crypto';
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent } from 'undici';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ArtifactCache } from '../../agent/artifacts/cache.js';
import { AgentPolicy } from '../../agent/policy.js';
import { inUidRange, runtimeUsers, uidRangeProblem } from '../../agent/runtime-user.js';
import { createAdapters } from '../../agent/runtimes/adapters.js';
import { executableDigest } from '../../agent/runtimes/files.js';
import { ensureStateDir, secureStateDir } from '../../agent/state.js';
import { IDLE } from '../../agent/supervisor/plan.js';
import { Supervisor } from '../../agent/supervisor/supervisor.js';
import type { Assignment } from '../../shared/contracts/desired.js';
import type { RuntimeReport } from '../../shared/contracts/heartbeat.js';
import { ArtifactUrlsExpired } from '../../agent/artifacts/download.js';
import type { PullProgress } from '../../agent/artifacts/cache.js';
import type { VersionArtifact } from '../../shared/contracts/artifacts.js';

/** What the file server does with the next request: serve it, cut it halfway, hang halfway, serve other bytes, or refuse it as an expired URL. */
type Behaviour = 'ok' | 'cut' | 'hang' | 'wrong' | 'expired' | 'ignore-range';

/** A file server on loopback with `Range: bytes=N-` support that misbehaves as each test scripts it. */
async function fileServer() {
  const files = new Map<string, Buffer>();
  const script: Behaviour[] = [];
  const requests: Array<{ path: string; range: string | null; sent: number }> = [];
  const state = { chunkDelayMs: 0 };
  const server: Server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url ?? '/', 'http://x').pathname.slice(1));
    const file = files.get(path);
    const record = { path, range: req.headers.range ?? null, sent: 0 };
    requests.push(record);
    const behaviour = script.shift() ?? 'ok';
    if (!file) return void res.writeHead(404).end();
    if (behaviour === 'expired')
      return void res
        .writeHead(403, { 'content-type': 'application/xml' })
        .end('<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>');
    const range = behaviour === 'ignore-range' ? null : /^bytes=(\d+)-$/.exec(record.range ?? '');
    const start = range ? Number(range[1]) : 0;
    const body = behaviour === 'wrong' ? Buffer.from(file.map((b) => b ^ 0xff)) : file;
    res.writeHead(range ? 206 : 200, {
      'content-length': String(body.length - start),
      ...(range ? { 'content-range': `bytes ${start}-${body.length - 1}/${body.length}` } : {}),
    });
    void (async () => {
      const stopAt = behaviour === 'cut' || behaviour === 'hang' ? start + Math.floor((body.length - start) / 2) : body.length;
      for (let at = start; at < stopAt; at += 16 * 1024) {
        const slice = body.subarray(at, Math.min(at + 16 * 1024, stopAt));
        await new Promise<void>((resolve) => res.write(slice, () => resolve()));
        record.sent += slice.length;
        if (state.chunkDelayMs > 0) await new Promise((r) => setTimeout(r, state.chunkDelayMs));
        if (res.destroyed) return;
      }
      // Cut once the client has read what was sent (bytes still in its buffers would be lost with the socket): given
      // half a second, as a loaded machine (CI's two suites at once) once read none of them within 50 ms.
      if (behaviour === 'cut') setTimeout(() => res.destroy(), 500);
      else if (behaviour !== 'hang') res.end();
    })();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const base = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
  return {
    files,
    script,
    requests,
    state,
    /** A signed-looking URL: the query stands for the signature, which must never reach a message. */
    url: (path: string) => `${base}/${encodeURIComponent(path)}?exp=1&sig=SECRET`,
    close: () => {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

let server: Awaited<ReturnType<typeof fileServer>>;
let dir: string;
let dispatcher: Agent;
const logged: Array<{ event: string; fields?: Record<string, unknown> }> = [];
const inUse = new Set<string>();

const sha256 = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');

/** Puts `files` (path → bytes) on the server and describes them as version `versionId`. */
function publish(versionId: string, files: Record<string, Buffer>, urlsExpireAt = Math.floor(Date.now() / 1000) + 3600): VersionArtifact {
  const entries = Object.entries(files);
  for (const [path, bytes] of entries) server.files.set(`${versionId}/${path}`, bytes);
  return {
    versionId,
    model: 'm',
    version: versionId,
    totalBytes: entries.reduce((sum, [, bytes]) => sum + bytes.length, 0),
    files: entries.map(([path, bytes]) => ({ path, size: bytes.length, sha256: sha256(bytes), url: server.url(`${versionId}/${path}`) })),
    urlsExpireAt,
  };
}

const cache = (extra: Partial<ConstructorParameters<typeof ArtifactCache>[0]> = {}) =>
  new ArtifactCache({
    dir: join(dir, 'cache'),
    maxBytes: 64 * 1024 ** 2,
    stallMs: 5_000,
    inUse: () => inUse,
    dispatcher,
    log: (event, fields) => void logged.push({ event, fields }),
    ...extra,
  });
const never = () => new AbortController().signal;
const exists = (path: string) =>
  stat(path).then(
    () => true,
    () => false,
  );

beforeAll(async () => {
  server = await fileServer();
  dispatcher = new Agent();
});
afterAll(async () => {
  await dispatcher.close();
  await server.close();
});
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'lnx-cache-'));
  server.requests.length = 0;
  server.script.length = 0;
  server.state.chunkDelayMs = 0;
  logged.length = 0;
  inUse.clear();
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('the artifact cache against a real file server', () => {
  it('downloads, verifies and lays a version out as a folder of hard links to its blobs', async () => {
    const weights = randomBytes(200_000);
    const config = Buffer.from('{"layers":2}');
    const version = publish('mv_fresh', { 'config.json': config, 'weights/model.safetensors': weights, 'weights/copy.bin': weights });
    const c = cache();
    const folder = await c.ensure(version, never());
    expect(folder).toBe(join(dir, 'cache', 'versions', 'mv_fresh'));
    expect(await readFile(join(folder, 'config.json'), 'utf8')).toBe('{"layers":2}');
    expect((await readFile(join(folder, 'weights/model.safetensors'))).equals(weights)).toBe(true);
    // Two files with the same bytes are one blob, fetched once; every file is a link to its blob, read-only.
    expect((await readdir(join(dir, 'cache', 'blobs'))).sort()).toEqual([sha256(config), sha256(weights)].sort());
    expect(server.requests.map((r) => r.path).sort()).toEqual(['mv_fresh/config.json', expect.stringMatching(/^mv_fresh\/weights\//)]);
    const blob = await stat(join(dir, 'cache', 'blobs', sha256(weights)));
    const linked = await stat(join(folder, 'weights/copy.bin'));
    expect(linked.ino).toBe(blob.ino);
    expect(blob.mode & 0o777).toBe(0o444);
    expect(await readdir(join(dir, 'cache', 'partial'))).toEqual([]);
    expect(c.cachedVersions()).toEqual(['mv_fresh']);

    // Asked again (another cache on the same dir: an agent restarted), nothing is downloaded.
    const again = cache();
    const progress: PullProgress[] = [];
    expect(await again.ensure(version, never(), (p) => void progress.push(p))).toBe(folder);
    expect(server.requests).toHaveLength(2);
    expect(progress).toEqual([]);
    expect(again.cachedVersions()).toEqual(['mv_fresh']);
  });

  it('resumes with Range after the server cuts the connection midway, sending about the file once', async () => {
    const weights = randomBytes(300_000);
    const version = publish('mv_cut', { 'model.bin': weights });
    server.script.push('cut');
    const folder = await cache().ensure(version, never());
    expect((await readFile(join(folder, 'model.bin'))).equals(weights)).toBe(true);
    const [first, second] = server.requests;
    expect(server.requests).toHaveLength(2);
    expect(first!.range).toBeNull();
    expect(second!.range).toMatch(/^bytes=\d+-$/);
    const resumedAt = Number(/\d+/.exec(second!.range!)![0]);
    expect(resumedAt).toBeGreaterThan(0);
    expect(resumedAt).toBeLessThanOrEqual(first!.sent);
    const sent = first!.sent + second!.sent;
    expect(sent).toBeGreaterThanOrEqual(weights.length);
    expect(sent).toBeLessThan(weights.length * 1.2);
  });

  it('starts from 0 when a server answers a Range request with the whole file (200)', async () => {
    const weights = randomBytes(100_000);
    const version = publish('mv_norange', { 'model.bin': weights });
    server.script.push('cut', 'ignore-range');
    const folder = await cache().ensure(version, never());
    expect((await readFile(join(folder, 'model.bin'))).equals(weights)).toBe(true);
    expect(server.requests[1]!.range).toMatch(/^bytes=/);
  });

  it('refuses bytes whose digest is not the manifest: partial deleted, the message names the file and both digests', async () => {
    const weights = randomBytes(50_000);
    const version = publish('mv_wrong', { 'model.bin': weights });
    server.script.push('wrong');
    const served = sha256(Buffer.from(weights.map((b) => b ^ 0xff)));
    const error = await cache()
      .ensure(version, never())
      .catch((e: Error) => e);
    expect((error as Error).message).toBe(
      `file model.bin of version mv_wrong has SHA-256 ${served}, the manifest says ${sha256(weights)}; the download was deleted`,
    );
    expect((error as Error).message).not.toContain('SECRET');
    expect(await readdir(join(dir, 'cache', 'partial'))).toEqual([]);
    expect(await readdir(join(dir, 'cache', 'blobs'))).toEqual([]);
    expect(await exists(join(dir, 'cache', 'versions', 'mv_wrong'))).toBe(false);
  });

  it('refuses a file shorter than the manifest says, and deletes it', async () => {
    const weights = randomBytes(40_000);
    const version = publish('mv_short', { 'model.bin': weights });
    server.files.set('mv_short/model.bin', weights.subarray(0, 30_000));
    const error = await cache()
      .ensure(version, never())
      .catch((e: Error) => e);
    expect((error as Error).message).toBe('file model.bin of version mv_short is 30000 bytes, the manifest says 40000; the download was deleted');
    expect(await readdir(join(dir, 'cache', 'partial'))).toEqual([]);
  });

  it('waits for fresh URLs when they expired (403): a retryable error, the partial kept and resumed with the new URLs', async () => {
    const weights = randomBytes(200_000);
    const expired = publish('mv_exp', { 'model.bin': weights }, Math.floor(Date.now() / 1000) - 120);
    server.script.push('cut', 'expired');
    const error = await cache()
      .ensure(expired, never())
      .catch((e: Error) => e);
    expect(error).toBeInstanceOf(ArtifactUrlsExpired);
    expect((error as Error).message).toMatch(
      /^file model\.bin of version mv_exp: its URL expired at .+ \(HTTP 403\); \d+ of 200000 bytes kept, the download resumes with the next desired state's URLs$/,
    );
    const kept = (await stat(join(dir, 'cache', 'partial', sha256(weights)))).size;
    expect(kept).toBeGreaterThan(0);

    // The next desired state's URLs (re-signed): the download resumes where it stopped.
    const fresh = publish('mv_exp', { 'model.bin': weights });
    const folder = await cache().ensure(fresh, never());
    expect((await readFile(join(folder, 'model.bin'))).equals(weights)).toBe(true);
    expect(server.requests.at(-1)!.range).toBe(`bytes=${kept}-`);
  });

  it('does not take a 403 before the URLs expire for an expiry', async () => {
    const version = publish('mv_403', { 'model.bin': randomBytes(1_000) });
    server.script.push('expired');
    const error = await cache()
      .ensure(version, never())
      .catch((e: Error) => e);
    expect(error).not.toBeInstanceOf(ArtifactUrlsExpired);
    expect((error as Error).message).toBe(`file model.bin of version mv_403: HTTP 403 from ${server.url('mv_403/model.bin').split('?')[0]}`);
  });

  it('downloads a version once for two prepares at the same time, and a blob once for two versions sharing it', async () => {
    const shared = randomBytes(100_000);
    const a = publish('mv_a', { 'model.bin': shared, 'a.json': Buffer.from('a') });
    const b = publish('mv_b', { 'weights.bin': shared, 'b.json': Buffer.from('b') });
    server.state.chunkDelayMs = 5;
    const c = cache();
    const folders = await Promise.all([c.ensure(a, never()), c.ensure(a, never()), c.ensure(b, never())]);
    expect(folders).toEqual([join(dir, 'cache', 'versions', 'mv_a'), join(dir, 'cache', 'versions', 'mv_a'), join(dir, 'cache', 'versions', 'mv_b')]);
    const bigRequests = server.requests.filter((r) => r.path.endsWith('.bin'));
    expect(bigRequests).toHaveLength(1);
    expect(server.requests).toHaveLength(3);
    expect((await readFile(join(folders[2]!, 'weights.bin'))).equals(shared)).toBe(true);
  });

  it('stops one waiter at once when its signal aborts, while another waiter of the same version goes on', async () => {
    const weights = randomBytes(300_000);
    const version = publish('mv_abort', { 'model.bin': weights });
    server.state.chunkDelayMs = 20;
    const c = cache();
    const quitter = new AbortController();
    const first = c.ensure(version, quitter.signal).catch((e: unknown) => e);
    const second = c.ensure(version, never());
    await new Promise((r) => setTimeout(r, 60));
    const abortedAt = Date.now();
    quitter.abort(new Error('retired'));
    expect(await first).toEqual(new Error('retired'));
    expect(Date.now() - abortedAt).toBeLessThan(50);
    expect(await second).toBe(join(dir, 'cache', 'versions', 'mv_abort'));
    expect(server.requests).toHaveLength(1);
  });

  it('fails a download that receives no byte for the stall timeout, keeping the partial', async () => {
    const weights = randomBytes(100_000);
    const version = publish('mv_stall', { 'model.bin': weights });
    server.script.push('hang');
    const started = Date.now();
    const error = await cache({ stallMs: 300 })
      .ensure(version, never())
      .catch((e: Error) => e);
    expect((error as Error).message).toBe('file model.bin of version mv_stall: no byte received for 0.3 s');
    expect(Date.now() - started).toBeLessThan(2_000);
    expect((await stat(join(dir, 'cache', 'partial', sha256(weights)))).size).toBeGreaterThan(0);
  });

  it('reports progress only when downloading: from the bytes already cached, increasing, up to the total', async () => {
    const shared = randomBytes(64 * 1024);
    const first = publish('mv_p1', { 'shared.bin': shared });
    const c = cache();
    await c.ensure(first, never());
    const fresh = randomBytes(256 * 1024);
    const second = publish('mv_p2', { 'shared.bin': shared, 'fresh.bin': fresh });
    server.state.chunkDelayMs = 40;
    const progress: PullProgress[] = [];
    await c.ensure(second, never(), (p) => void progress.push(p));
    const total = shared.length + fresh.length;
    expect(progress.length).toBeGreaterThanOrEqual(3);
    expect(progress[0]).toEqual({ bytesDone: shared.length, bytesTotal: total });
    expect(progress.at(-1)).toEqual({ bytesDone: total, bytesTotal: total });
    for (let i = 1; i < progress.length; i++) expect(progress[i]!.bytesDone).toBeGreaterThanOrEqual(progress[i - 1]!.bytesDone);
    expect(new Set(progress.map((p) => p.bytesDone)).size).toBeGreaterThanOrEqual(3);
  });

  it('evicts the least recently used version no assignment needs, never one in use, and refuses what cannot fit', async () => {
    const kib = (n: number) => randomBytes(n * 1024);
    const c = cache({ maxBytes: 250 * 1024 });
    const inUseVersion = publish('mv_inuse', { 'm.bin': kib(100) });
    const idle = publish('mv_idle', { 'm.bin': kib(100) });
    await c.ensure(inUseVersion, never()); // the least recently used, but in use
    await c.ensure(idle, never());
    inUse.add('mv_inuse');
    const next = publish('mv_next', { 'm.bin': kib(100) });
    await c.ensure(next, never());
    expect((await readdir(join(dir, 'cache', 'versions'))).sort()).toEqual(['mv_inuse', 'mv_next']);
    expect(await readdir(join(dir, 'cache', 'blobs'))).toHaveLength(2);
    expect(c.cachedVersions()).toEqual(['mv_inuse', 'mv_next']);
    expect(logged.find((l) => l.event === 'artifact cache eviction')?.fields).toMatchObject({ versions: ['mv_idle'], for: 'mv_next' });

    inUse.add('mv_next');
    const error = await c.ensure(publish('mv_huge', { 'm.bin': kib(60) }), never()).catch((e: Error) => e);
    expect((error as Error).message).toBe('cache budget of 256000 bytes cannot hold version mv_huge (61440 bytes) beside the versions in use (204800 bytes)');
    expect(server.requests.filter((r) => r.path.startsWith('mv_huge'))).toEqual([]);
  });
});

describe('cache dir permissions', () => {
  it('lays folders out readable by others (a runtime user) and blobs read-only', async () => {
    await mkdir(join(dir, 'shared'), { mode: 0o755 });
    await chmod(dir, 0o755);
    const version = publish('mv_modes', { 'a/b.json': Buffer.from('{}') });
    const folder = await cache({ dir: join(dir, 'shared', 'cache') }).ensure(version, never());
    expect((await stat(folder)).mode & 0o777).toBe(0o755);
    expect((await stat(join(folder, 'a'))).mode & 0o777).toBe(0o755);
    expect((await stat(join(folder, 'a/b.json'))).mode & 0o777).toBe(0o444);
  });
});

/** A runtime that serves, on /health, the folder it was given as `{model_path}` and the config it read from there. */
const RUNTIME = `
const http = require('node:http');
const fs = require('node:fs');
const modelPath = process.argv.find((a) => a.startsWith('model=')).slice(6);
http.createServer((req, res) => {
  let config = null;
  try { config = fs.readFileSync(modelPath + '/config.json', 'utf8'); } catch (e) { config = String(e.code); }
  res.end(JSON.stringify({ instanceId: process.env.LUNANEXA_RUNTIME_INSTANCE, modelPath, config }));
}).listen(Number(process.env.PORT), '127.0.0.1');
`;

describe('a version through the supervisor and the process adapter', () => {
  const root = process.getuid?.() === 0;

  async function setUp(cacheDir?: string) {
    const stateDir = join(dir, 'state');
    await ensureStateDir(stateDir);
    const policy = AgentPolicy.parse({
      templates: { fixture: { executable: process.execPath } },
      // Run as root (CI containers), runtimes run as `nobody`, which must be able to read the cache.
      ...(root ? { runAs: { user: 'nobody' } } : {}),
      cache: { ...(cacheDir ? { dir: cacheDir } : {}), stallSeconds: 5 },
    });
    const adapters = createAdapters({ stateDir, policy, users: await runtimeUsers(policy, root), log: () => {} });
    return { adapters };
  }

  const assignment = async (version: VersionArtifact): Promise<Assignment> => ({
    assignmentId: 'asg_cache',
    deploymentId: 'dep_cache',
    deploymentName: 'cache',
    model: 'm',
    deploymentGeneration: 1,
    runtime: {
      kind: 'template',
      template: 'fixture',
      executable: process.execPath,
      executableSha256: await executableDigest(process.execPath),
      args: ['-e', RUNTIME, 'model={model_path}'],
      env: {},
      healthPath: '/health',
    },
    artifact: null,
    restartPolicy: { mode: 'never', maxRestarts: 0, backoffMs: 100 },
    resources: { gpus: 0, memoryMiB: 1 },
    version,
    // Shorter than the pull: only the runtime's own loading counts against it.
    startup: { timeoutMs: 1_000, probeIntervalMs: 100, failureThreshold: 3 },
    templateHash: 'cache-fixture',
  });

  it('pulls (with bytes) without counting the pull against the start timeout, then starts with {model_path} at the version folder', async () => {
    await chmod(dir, 0o755);
    const { adapters } = await setUp(join(dir, 'cache'));
    const config = '{"hidden_size":8}';
    const version = publish('mv_run', { 'config.json': Buffer.from(config), 'model.safetensors': randomBytes(256 * 1024) });
    server.state.chunkDelayMs = 90; // 16 chunks: about 1.4 s of pulling, past the 1 s start timeout
    // Each state as reported when it was entered, and the last report while pulling.
    const seen: RuntimeReport[] = [];
    let pulling: RuntimeReport | undefined;
    const supervisor: Supervisor = new Supervisor({
      adapters,
      onChange: () => {
        const report = supervisor.reports()[0];
        if (report && seen.at(-1)?.state !== report.state) seen.push(report);
      },
      load: () => IDLE,
      log: () => {},
      checkIntervalMs: 50,
    });
    supervisor.start();
    try {
      supervisor.apply(1, [await assignment(version)]);
      const deadline = Date.now() + 8_000;
      while (Date.now() < deadline && !['ready', 'failed'].includes(seen.at(-1)?.state ?? '')) {
        const report = supervisor.reports()[0];
        if (report?.state === 'pulling') pulling = report;
        await new Promise((r) => setTimeout(r, 20));
      }
      expect(seen.map((r) => r.state)).toEqual(['preparing', 'pulling', 'starting', 'ready']);
      expect(seen[1]!.progress).toMatchObject({ bytesDone: 0 });
      if (!pulling) throw new Error('no report while pulling');
      expect(pulling.progress).toMatchObject({ bytesTotal: config.length + 256 * 1024, timeoutMs: 1_000 });
      expect(pulling.progress!.bytesDone).toBeGreaterThan(0);
      // Held while pulling: the time counted against the start timeout stopped when the pull began.
      expect(pulling.progress!.elapsedMs).toBeLessThan(1_000);
      expect(seen[2]!.progress).not.toHaveProperty('bytesDone');

      const target = supervisor.readyHandle('asg_cache');
      if (!target.ok) throw new Error(target.message);
      const health = (await (await fetch(`${target.handle.baseUrl}/health`)).json()) as { modelPath: string; config: string };
      expect(health).toMatchObject({ modelPath: join(dir, 'cache', 'versions', 'mv_run'), config });
      expect(adapters.template.cachedVersions?.()).toEqual(['mv_run']);
    } finally {
      await supervisor.shutdown({ stopRuntimes: true, drain: false });
    }
  });

  it.runIf(root)('refuses, by policy, a cache in the private state dir when runtimes run as another user', async () => {
    const { adapters } = await setUp();
    const version = publish('mv_private', { 'config.json': Buffer.from('{}') });
    const error = await adapters.template.prepare(await assignment(version), never()).catch((e: Error) => e);
    expect((error as Error).message).toBe(
      `refused by local policy: the model cache ${join(dir, 'state', 'cache')} lies in the agent's private state dir, which runtimes running as nobody cannot read: set cache.dir in the local policy`,
    );
    expect(server.requests).toEqual([]);
  });

  it.runIf(root)('serves a version from the cache in the state dir to a runtime with a uid of a range, whose group passes through it', async () => {
    await chmod(dir, 0o755);
    let uids = { first: 2_140_000_000 + randomInt(0, 400_000) * 16, count: 2 };
    while ((await uidRangeProblem(uids)) !== null) uids = { first: uids.first + 16, count: 2 };
    const stateDir = join(dir, 'state-range');
    await ensureStateDir(stateDir);
    // As the agent does at start: 0710 and the runtimes' group.
    await secureStateDir(stateDir, { runtimeUid: (uid) => inUidRange(uids, uid), group: uids.first });
    const policy = AgentPolicy.parse({
      templates: { fixture: { executable: process.execPath } },
      runAs: { uids, group: uids.first },
      cache: { stallSeconds: 5 },
    });
    const adapter = createAdapters({ stateDir, policy, users: await runtimeUsers(policy, true), log: () => {} }).template;
    const config = '{"hidden_size":8}';
    const a = await assignment(publish('mv_state_dir', { 'config.json': Buffer.from(config) }));
    await adapter.prepare(a, never());
    const handle = await adapter.start(a);
    try {
      expect(handle.uid).toBe(uids.first);
      let health: { modelPath?: string; config?: string } = {};
      for (const deadline = Date.now() + 10_000; health.config === undefined && Date.now() < deadline; await new Promise((r) => setTimeout(r, 50)))
        health = await fetch(`${handle.baseUrl}/health`).then(
          (response) => response.json() as Promise<typeof health>,
          () => ({}),
        );
      expect(health).toMatchObject({ modelPath: join(stateDir, 'cache', 'versions', 'mv_state_dir'), config });
    } finally {
      await adapter.stop(handle);
    }
  });
});
