import { spawn } from 'node:child_process';
import { PassThrough } from 'node:stream';
import { randomUUID } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent } from 'undici';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { exportJWK, generateKeyPair, SignJWT, type CryptoKey } from 'jose';
import { createDesiredIntake, verifyDesiredState } from '../../agent/link/desired.js';
import { createInvocationRunner, type InvocationRunner } from '../../agent/invocations/runner.js';
import { pidAlive } from '../../agent/runtimes/process-group.js';
import { createAdapters } from '../../agent/runtimes/adapters.js';
import { executableDigest } from '../../agent/runtimes/files.js';
import { AgentPolicy } from '../../agent/policy.js';
import { runtimeUsers, type RuntimeUsers } from '../../agent/runtime-user.js';
import type { RuntimeAdapter, RuntimeHandle } from '../../agent/runtimes/adapter.js';
import { Supervisor } from '../../agent/supervisor/supervisor.js';
import { ensureStateDir, loadHeldGen, saveHeldGen } from '../../agent/state.js';
import type { Assignment, StartupSpec } from '../../shared/contracts/desired.js';
import type { Jwks } from '../../shared/contracts/enrollment.js';
import type { RuntimeReport } from '../../shared/contracts/heartbeat.js';
import type { Frame, Invoke } from '../../shared/contracts/relay.js';
import { FrameDecoder } from '../../shared/frame-codec.js';
import { createUplink } from '../../agent/link/uplink.js';

/** Marks every process of this file: they are found (and cleaned up) by it. */
const TOKEN = `lnx-fixture-${randomUUID()}`;

/**
 * A small OpenAI-style runtime: answers /health with its instance id after `loadMs`, streams `chunks` SSE events
 * `intervalMs` apart after `headMs`; with `mode=mute` it never listens (a runtime hung while loading).
 */
const RUNTIME = `
const http = require('node:http');
const opts = Object.fromEntries(process.argv.slice(1).map((a) => a.split('=')));
const instanceId = process.env.LUNANEXA_RUNTIME_INSTANCE;
console.log('runtime ' + opts.tag + ' starting');
if (opts.mode === 'mute') setInterval(() => {}, 1e6);
else setTimeout(() => {
  http.createServer((req, res) => {
    if (req.url === '/health') return res.end(JSON.stringify({ status: 'ok', instanceId }));
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      const { chunks = 3, intervalMs = 10, headMs = 0 } = JSON.parse(body || '{}');
      setTimeout(() => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        let i = 0;
        const timer = setInterval(() => {
          if (i < chunks) res.write('data: {"i":' + i++ + '}\\n\\n');
          else { clearInterval(timer); res.end('data: [DONE]\\n\\n'); }
        }, intervalMs);
      }, headMs);
    });
  }).listen(Number(process.env.PORT), '127.0.0.1', () => console.log('runtime ' + opts.tag + ' listening'));
}, Number(opts.loadMs || 0));
`;

interface FixtureOptions {
  tag: string;
  mode?: 'serve' | 'mute';
  loadMs?: number;
  generation?: number;
  startup?: Partial<StartupSpec>;
  restartPolicy?: Assignment['restartPolicy'];
}

/** An assignment of the fixture runtime; its template is its tag. */
function fixture(assignmentId: string, o: FixtureOptions): Assignment {
  return {
    assignmentId,
    deploymentId: 'dep_fixture',
    deploymentName: 'fixture',
    model: 'fixture-model',
    deploymentGeneration: o.generation ?? 1,
    runtime: {
      kind: 'template',
      template: 'fixture',
      executable: process.execPath,
      executableSha256: nodeSha256,
      args: ['-e', RUNTIME, `token=${TOKEN}`, `tag=${o.tag}`, `mode=${o.mode ?? 'serve'}`, `loadMs=${o.loadMs ?? 0}`],
      env: {},
      healthPath: '/health',
    },
    artifact: null,
    restartPolicy: o.restartPolicy ?? { mode: 'never', maxRestarts: 0, backoffMs: 100 },
    resources: { gpus: 0, memoryMiB: 1 },
    startup: { timeoutMs: 60_000, probeIntervalMs: 100, failureThreshold: 3, ...o.startup },
    templateHash: `template-${o.tag}`,
  };
}

/** Live processes of this file, by pid, with their argv (Linux /proc). */
async function fixtures(): Promise<Map<number, string[]>> {
  const found = new Map<number, string[]>();
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = await readFile(`/proc/${entry}/stat`, 'utf8');
      // A zombie is dead already, only not reaped by its parent (this test process, for the strangers it spawns).
      if (stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z')) continue;
      const argv = (await readFile(`/proc/${entry}/cmdline`, 'utf8')).split('\0');
      if (argv.includes(`token=${TOKEN}`)) found.set(Number(entry), argv);
    } catch {
      // Gone while we looked.
    }
  }
  return found;
}
const tagsRunning = async () => [...(await fixtures()).values()].map((argv) => argv.find((a) => a.startsWith('tag='))!.slice(4)).sort();

async function waitFor<T>(check: () => T | Promise<T>, what: string, timeoutMs = 15_000): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A stand-in for the control plane's frames endpoint: records each invocation's frames. */
async function framesSink() {
  const frames = new Map<string, Frame[]>();
  const server: Server = createServer((req, res) => {
    const match = /^\/agent\/v1\/invocations\/([^/]+)\/frames$/.exec(req.url ?? '');
    if (!match) {
      res.statusCode = 404;
      return res.end();
    }
    const id = decodeURIComponent(match[1]!);
    const list = frames.get(id) ?? [];
    frames.set(id, list);
    res.setHeader('content-type', 'application/json');
    if (req.method === 'GET') return res.end(JSON.stringify({ nextOffset: list.length }));
    const decoder = new FrameDecoder({ frame: (_id, frame) => void list.push(frame), control: () => {} });
    req.on('data', (chunk: Buffer) => decoder.push(new Uint8Array(chunk)));
    req.on('end', () => res.end(JSON.stringify({ nextOffset: list.length })));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  return {
    url: `http://127.0.0.1:${port}`,
    frames: (id: string) => frames.get(id) ?? [],
    finished: (id: string) => (frames.get(id) ?? []).some((f) => f.t === 'end' || f.t === 'error'),
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** An uplink never started (as with `--uplink off`): every invocation goes on an upload of its own, to the sink. */
const idleUplink = () =>
  createUplink({ baseUrl: 'http://127.0.0.1:9', dispatcher: new Agent(), signedHeaders: async () => ({}), confirmMs: 1_000, maxAgeMs: 60_000, log: () => {} });

const invoke = (assignmentId: string, body: Record<string, number> = {}): Invoke => ({
  invocationId: `inv_${randomUUID()}`,
  workloadId: 'wl_1',
  assignmentId,
  path: '/v1/chat/completions',
  body: JSON.stringify(body),
  deadline: Date.now() + 30_000,
  idempotencyKey: null,
  stream: true,
});

let stateDir: string;
const logged: Array<{ event: string; fields: Record<string, unknown> }> = [];
const log = (event: string, fields: Record<string, unknown> = {}) => void logged.push({ event, fields });

/** The fixture runs as the node binary itself, pinned by its real digest, allowed by the local policy. */
let nodeSha256: string;
const root = process.getuid?.() === 0;
// Run as root (CI containers), the agent needs an unprivileged user for its runtimes: `nobody` is on every Linux.
const policy = AgentPolicy.parse({ templates: { fixture: { executable: process.execPath } }, ...(root ? { runAs: { user: 'nobody' } } : {}) });
let users: RuntimeUsers | null;
const adapters = () => createAdapters({ stateDir, policy, users, log });

beforeAll(async () => {
  nodeSha256 = await executableDigest(process.execPath);
  users = await runtimeUsers(policy, root);
});

beforeEach(async () => {
  stateDir = await mkdtemp(join(tmpdir(), 'lnx-agent-'));
  await ensureStateDir(stateDir);
  logged.length = 0;
});
afterEach(async () => {
  for (const pid of (await fixtures()).keys()) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // Exited meanwhile.
    }
  }
  await rm(stateDir, { recursive: true, force: true });
});

describe('process adapter: adoption never duplicates a runtime', () => {
  let adapter: RuntimeAdapter;
  beforeEach(() => {
    adapter = adapters().template;
  });
  /** The adapter of an agent started again on the same state dir. */
  const restarted = () => adapters().template;

  it('adopts its own runtime left running with the same template', async () => {
    const v1 = fixture('asg_a', { tag: 'v1' });
    const handle = await adapter.start(v1);
    await waitFor(() => adapter.ready(handle), 'the runtime to listen');
    const adopted = await restarted().inspect(v1);
    expect(adopted).toEqual({ handle, ready: true });
  });

  it('adopts a runtime from a record an older agent wrote, before the health path, GPUs and token were kept', async () => {
    // Records live on each node's disk, out of reach of any migration: the schema's defaults are the upgrade.
    const v1 = fixture('asg_a', { tag: 'v1' });
    const handle = await adapter.start(v1);
    await waitFor(() => adapter.ready(handle), 'the runtime to listen');
    const recordFile = join(stateDir, 'runtimes', 'asg_a.json');
    const { healthPath: _health, gpuIndices: _gpus, token: _token, ...older } = JSON.parse(await readFile(recordFile, 'utf8')) as Record<string, unknown>;
    await writeFile(recordFile, JSON.stringify(older));
    const adopted = await restarted().inspect(v1);
    // Launched without a token, it is called without one.
    expect(adopted).toEqual({ handle: { ...handle, healthPath: '/health', gpuIndices: [], token: null }, ready: true });
  });

  it('adopts its own runtime that is still loading, as not ready (no second launch, no kill)', async () => {
    const v1 = fixture('asg_a', { tag: 'v1', loadMs: 60_000 });
    const handle = await adapter.start(v1);
    const adopted = await restarted().inspect(v1);
    expect(adopted).toEqual({ handle, ready: false });
    expect(pidAlive(handle.pid)).toBe(true);
  });

  it('stops its own runtime whose template changed, before anything is launched in its place', async () => {
    const handle = await adapter.start(fixture('asg_a', { tag: 'v1' }));
    await waitFor(() => adapter.ready(handle), 'the runtime to listen');
    expect(await restarted().inspect(fixture('asg_a', { tag: 'v2' }))).toBeNull();
    expect(pidAlive(handle.pid)).toBe(false);
    expect(await readdir(join(stateDir, 'runtimes'))).toEqual(['asg_a.log']);
    expect(logged.map((l) => l.event)).toContain('stopping a runtime that cannot be adopted');
  });

  it('stops, on the first desired state after a restart, a runtime whose assignment left it while the agent was down', async () => {
    const kept = await adapter.start(fixture('asg_a', { tag: 'v1' }));
    const orphan = await adapter.start(fixture('asg_b', { tag: 'v1' }));
    await waitFor(() => adapter.ready(orphan), 'the runtime to listen');
    const next = new Supervisor({
      adapters: adapters(),
      onChange: () => {},
      load: () => ({ queued: 0, active: 0, lastServedAt: null, latestDeadline: null }),
      log,
      checkIntervalMs: 50,
    });
    next.apply(1, [fixture('asg_a', { tag: 'v1' })]);
    try {
      await waitFor(async () => !(await readdir(join(stateDir, 'runtimes'))).includes('asg_b.json'), 'the orphaned runtime forgotten');
      expect(pidAlive(orphan.pid)).toBe(false);
      expect(pidAlive(kept.pid)).toBe(true);
    } finally {
      await next.shutdown({ stopRuntimes: true, drain: false });
    }
  });

  it('knows its own hung runtime by its environment when health cannot answer, and stops it', async () => {
    const handle = await adapter.start(fixture('asg_a', { tag: 'v1', mode: 'mute' }));
    expect(await adapter.ready(handle)).toBe(false);
    expect(await restarted().inspect(fixture('asg_a', { tag: 'v2', mode: 'mute' }))).toBeNull();
    expect(pidAlive(handle.pid)).toBe(false);
  });

  it('leaves a process that reused the pid alone, and launches beside it', async () => {
    // Its own process group, as a runtime would be: a stray group kill would reach it.
    const stranger = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1e6)', `token=${TOKEN}`, 'tag=stranger'], { detached: true, stdio: 'ignore' });
    await new Promise((resolve) => stranger.once('spawn', resolve));
    const v1 = fixture('asg_a', { tag: 'v1' });
    const record = {
      assignmentId: 'asg_a',
      pid: stranger.pid!,
      port: 1,
      baseUrl: 'http://127.0.0.1:1',
      instanceId: randomUUID(),
      specHash: 'x',
      startedAt: new Date().toISOString(),
      healthPath: '/health',
      gpuIndices: [],
    };
    await writeFile(join(stateDir, 'runtimes', 'asg_a.json'), JSON.stringify(record));
    expect(await restarted().inspect(v1)).toBeNull();
    expect(pidAlive(stranger.pid!)).toBe(true);
    expect(logged.find((l) => l.event === 'runtime record names a process that is not ours: left alone')?.fields).toMatchObject({ pid: stranger.pid });

    // The same when the record still names our template: only the instance id in its environment counts.
    await writeFile(join(stateDir, 'runtimes', 'asg_a.json'), JSON.stringify(record));
    const handle = await adapter.start(v1);
    expect(pidAlive(stranger.pid!)).toBe(true);
    await waitFor(() => adapter.ready(handle), 'the new runtime to listen');
    expect(await tagsRunning()).toEqual(['stranger', 'v1']);
    stranger.kill('SIGKILL');
  });

  it('stops a leftover runtime of its own before starting another', async () => {
    const v1 = fixture('asg_a', { tag: 'v1' });
    const first = await adapter.start(v1);
    const second = await adapter.start(v1);
    expect(pidAlive(first.pid)).toBe(false);
    await waitFor(() => adapter.ready(second), 'the second runtime to listen');
    expect((await fixtures()).size).toBe(1);
  });
});

describe('supervisor with real runtimes', () => {
  let sink: Awaited<ReturnType<typeof framesSink>>;
  let supervisor: Supervisor;
  let runner: InvocationRunner;
  let changes = 0;

  beforeAll(async () => {
    sink = await framesSink();
  });
  afterAll(async () => {
    await sink.close();
  });
  beforeEach(() => {
    changes = 0;
    runner = createInvocationRunner({
      baseUrl: sink.url,
      dispatcher: new Agent(),
      signedHeaders: async (_method, _path, _body, extra = {}) => ({ ...extra }),
      uplink: idleUplink(),
      runtime: (assignmentId) => supervisor.readyHandle(assignmentId),
      onLoadChange: () => {},
      log,
    });
    supervisor = new Supervisor({
      adapters: adapters(),
      onChange: () => void (changes += 1),
      load: (assignmentId) => runner.load(assignmentId),
      log,
      checkIntervalMs: 50,
      logRotateIntervalMs: 200,
    });
    supervisor.start();
  });
  afterEach(async () => {
    await supervisor.shutdown({ stopRuntimes: true, drain: false });
  });

  const report = (assignmentId: string): RuntimeReport | undefined => supervisor.reports().find((r) => r.assignmentId === assignmentId);
  const ready = (assignmentId: string) => waitFor(() => (report(assignmentId)?.state === 'ready' ? report(assignmentId) : null), `${assignmentId} to be ready`);

  it('survives two desired states a millisecond apart and runs the newer', async () => {
    const { publicKey, privateKey } = await generateKeyPair('EdDSA', { crv: 'Ed25519', extractable: true });
    const pub = await exportJWK(publicKey);
    const jwks: Jwks = { keys: [{ kty: pub.kty!, crv: pub.crv!, x: pub.x!, kid: 'sig_test', alg: 'EdDSA', use: 'sig' }] };
    const sign = (gen: number, assignments: Assignment[], key: CryptoKey = privateKey) =>
      new SignJWT({ gen, assignments })
        .setProtectedHeader({ alg: 'EdDSA', kid: 'sig_test' })
        .setIssuer('cls_test')
        .setSubject('mch_test')
        .setIssuedAt()
        .setExpirationTime('10m')
        .sign(key);
    const intake = createDesiredIntake({
      heldGen: await loadHeldGen(stateDir),
      verify: (jws, heldGen) => verifyDesiredState({ jws, jwks, machineId: 'mch_test', clusterId: 'cls_test', heldGen }),
      save: (gen) => saveHeldGen(stateDir, gen),
      apply: (desired) => supervisor.apply(desired.gen, desired.assignments),
      onRejected: (reason) => log('desired state rejected', { reason }),
      log,
    });
    const first = await sign(1, [fixture('asg_a', { tag: 'v1' })]);
    const second = await sign(2, [fixture('asg_a', { tag: 'v2', generation: 2 })]);
    intake.offer(first);
    await new Promise((r) => setTimeout(r, 1));
    intake.offer(second);
    await waitFor(() => !intake.busy(), 'both states to be taken');
    expect(intake.heldGen()).toBe(2);
    expect(await loadHeldGen(stateDir)).toBe(2);

    const running = await ready('asg_a');
    expect(running.gen).toBe(2);
    const record = JSON.parse(await readFile(join(stateDir, 'runtimes', 'asg_a.json'), 'utf8')) as { pid: number };
    expect((await fixtures()).get(record.pid)).toContain('tag=v2');
    await waitFor(async () => (await tagsRunning()).join() === 'v2', 'v1 to be gone');
    // No temporary file was left behind by the racing writes.
    expect((await readdir(stateDir)).filter((name) => name.endsWith('.tmp'))).toEqual([]);
    expect(logged.filter((l) => l.event === 'desired state rejected' || l.event === 'desired state intake failed')).toEqual([]);
  });

  it('takes a generation bump and startup changes in place, without a restart', async () => {
    const v1 = fixture('asg_a', { tag: 'v1' });
    supervisor.apply(1, [v1]);
    await ready('asg_a');
    const { pid } = JSON.parse(await readFile(join(stateDir, 'runtimes', 'asg_a.json'), 'utf8')) as { pid: number };
    const states: unknown[] = [];
    const before = logged.length;
    supervisor.apply(2, [fixture('asg_a', { tag: 'v1', generation: 2, startup: { probeIntervalMs: 200, failureThreshold: 5 } })]);
    await waitFor(() => logged.some((l) => l.event === 'runtime updated in place'), 'the update in place');
    await new Promise((r) => setTimeout(r, 300));
    for (const entry of logged.slice(before)) if (entry.event === 'runtime state') states.push(entry.fields.state);
    expect(states).toEqual([]);
    expect(report('asg_a')).toMatchObject({ state: 'ready', gen: 2, restarts: 0 });
    const again = JSON.parse(await readFile(join(stateDir, 'runtimes', 'asg_a.json'), 'utf8')) as { pid: number };
    expect(again.pid).toBe(pid);
    expect(pidAlive(pid)).toBe(true);
  });

  it('reports start-up progress against startup.timeoutMs, and stops a runtime retired while starting at once', async () => {
    supervisor.apply(1, [fixture('asg_a', { tag: 'slow', loadMs: 60_000, startup: { timeoutMs: 600_000 } })]);
    const starting = await waitFor(() => (report('asg_a')?.state === 'starting' ? report('asg_a') : null), 'starting');
    expect(starting.progress).toMatchObject({ timeoutMs: 600_000 });
    await waitFor(async () => (await tagsRunning()).join() === 'slow', 'the slow runtime to run');
    await new Promise((r) => setTimeout(r, 150));
    expect(report('asg_a')!.progress!.elapsedMs).toBeGreaterThanOrEqual(150);
    expect(supervisor.readyHandle('asg_a')).toMatchObject({ ok: false, code: 'runtime_unavailable' });

    const retiredAt = Date.now();
    supervisor.apply(2, []);
    await waitFor(async () => (await tagsRunning()).length === 0, 'the starting runtime to stop', 3_000);
    expect(Date.now() - retiredAt).toBeLessThan(3_000);
    await waitFor(() => report('asg_a') === undefined, 'the runtime to be forgotten');
    // Retired for good: its log files go with it.
    expect(await readdir(join(stateDir, 'runtimes'))).toEqual([]);
  });

  it('aborts a launch whose template changes and launches the new template', async () => {
    supervisor.apply(1, [fixture('asg_a', { tag: 'slow', loadMs: 60_000 })]);
    await waitFor(async () => (await tagsRunning()).join() === 'slow', 'the slow runtime to run');
    supervisor.apply(2, [fixture('asg_a', { tag: 'fast', generation: 2 })]);
    expect(await ready('asg_a')).toMatchObject({ gen: 2, restarts: 0 });
    expect(await tagsRunning()).toEqual(['fast']);
  });

  it('drains a retired runtime: in-flight invocations complete, new ones are refused before any head, then it stops', async () => {
    supervisor.apply(1, [fixture('asg_a', { tag: 'v1' })]);
    await ready('asg_a');
    const long = invoke('asg_a', { chunks: 25, intervalMs: 40, headMs: 150 });
    runner.run(long);
    // Handed to the runtime, no head yet: queued.
    await waitFor(() => report('asg_a')!.queueDepth === 1, 'the invocation to be queued');
    expect(report('asg_a')).toMatchObject({ activeInvocations: 0, warm: false });
    await waitFor(() => report('asg_a')!.activeInvocations === 1, 'the invocation to stream');
    expect(report('asg_a')).toMatchObject({ queueDepth: 0, warm: true });

    supervisor.apply(2, []);
    await waitFor(() => report('asg_a')?.state === 'draining', 'draining');
    expect(supervisor.readyHandle('asg_a')).toMatchObject({ ok: false, code: 'replica_draining' });
    const refused = invoke('asg_a');
    runner.run(refused);
    await waitFor(() => sink.finished(refused.invocationId), 'the refusal');
    expect(sink.frames(refused.invocationId)).toEqual([
      { o: 0, t: 'accept' },
      { o: 1, t: 'error', code: 'replica_draining', message: expect.any(String) },
    ]);
    expect(report('asg_a')?.state).toBe('draining');

    await waitFor(() => sink.finished(long.invocationId), 'the in-flight invocation to finish');
    const frames = sink.frames(long.invocationId);
    expect(frames[0]).toEqual({ o: 0, t: 'accept' });
    expect(frames[1]).toMatchObject({ t: 'head', status: 200 });
    expect(frames.at(-1)).toMatchObject({ t: 'end', tokens: 25 });
    expect(
      frames
        .filter((f) => f.t === 'data')
        .map((f) => (f.t === 'data' ? Buffer.from(f.d).toString('utf8') : ''))
        .join(''),
    ).toContain('data: [DONE]');
    await waitFor(() => report('asg_a') === undefined, 'the drained runtime to be retired');
    expect(await tagsRunning()).toEqual([]);
  });

  it('fails a runtime not ready within startup.timeoutMs, and keeps its last log lines readable without a process', async () => {
    // Long enough for the runtime (a Node process) to print its first line on a loaded machine before it times out.
    supervisor.apply(1, [fixture('asg_a', { tag: 'hung', mode: 'mute', startup: { timeoutMs: 3_000 } })]);
    const failed = await waitFor(() => (report('asg_a')?.state === 'failed' ? report('asg_a') : null), 'the start timeout', 15_000);
    expect(failed.message).toBe('runtime did not become ready in time (start timeout 3000 ms)');
    expect(failed.progress).toBeNull();
    expect(supervisor.status()).toBe('degraded');
    expect(await tagsRunning()).toEqual([]);
    const lines = await supervisor.logs('asg_a', 10);
    expect(lines).toContain('runtime hung starting');
    expect(await supervisor.logs('asg_a', 10)).toEqual(lines);
  });

  it('leaves runtimes running when it stops, and the next agent adopts them, a runtime still loading included', async () => {
    supervisor.apply(1, [fixture('asg_a', { tag: 'v1' }), fixture('asg_b', { tag: 'slow', loadMs: 1_500 })]);
    await ready('asg_a');
    await waitFor(() => report('asg_b')?.state === 'starting', 'the slow runtime to start');
    await supervisor.shutdown({ stopRuntimes: false, drain: true });
    const pids = [...(await fixtures()).keys()].sort();
    expect(pids).toHaveLength(2);

    const next = new Supervisor({ adapters: adapters(), onChange: () => {}, load: (id) => runner.load(id), log, checkIntervalMs: 50 });
    next.start();
    try {
      next.apply(2, [fixture('asg_a', { tag: 'v1', generation: 2 }), fixture('asg_b', { tag: 'slow', loadMs: 1_500 })]);
      await waitFor(() => next.reports().every((r) => r.state === 'ready') && next.reports().length === 2, 'both runtimes to be ready');
      expect(logged.filter((l) => l.event === 'runtime adopted').map((l) => l.fields.ready)).toEqual(expect.arrayContaining([true, false]));
      expect([...(await fixtures()).keys()].sort()).toEqual(pids);
      expect(next.reports().map((r) => r.restarts)).toEqual([0, 0]);
    } finally {
      await next.shutdown({ stopRuntimes: true, drain: false });
    }
  });

  it('reports warm models, and draining while it shuts down', async () => {
    supervisor.apply(1, [fixture('asg_a', { tag: 'v1' })]);
    await ready('asg_a');
    expect(supervisor.warmModels()).toEqual(['fixture-model']);
    expect(supervisor.status()).toBe('ready');
    const call = invoke('asg_a', { chunks: 10, intervalMs: 30 });
    runner.run(call);
    await waitFor(() => report('asg_a')!.activeInvocations === 1, 'the invocation to stream');
    const stopping = supervisor.shutdown({ stopRuntimes: true, drain: true });
    expect(supervisor.status()).toBe('draining');
    expect(supervisor.readyHandle('asg_a')).toMatchObject({ ok: false, code: 'replica_draining' });
    await stopping;
    expect(sink.frames(call.invocationId).at(-1)).toMatchObject({ t: 'end' });
    expect(await tagsRunning()).toEqual([]);
    expect(changes).toBeGreaterThan(0);
  });
});

describe('invocation runner: per-runtime counts', () => {
  let sink: Awaited<ReturnType<typeof framesSink>>;
  beforeAll(async () => {
    sink = await framesSink();
  });
  afterAll(async () => {
    await sink.close();
  });

  /** A runtime whose answers the test drives: each call waits for `answer` to hand it a head and a body. */
  function scriptedRuntime() {
    const calls: Array<{ answer: (body: PassThrough) => void; fail: (error: Error) => void }> = [];
    const adapter = {
      invoke: () =>
        new Promise((resolve, reject) => {
          calls.push({ answer: (body) => resolve({ status: 200, contentType: 'text/event-stream', body }), fail: reject });
        }),
    } as unknown as RuntimeAdapter;
    return { adapter, calls };
  }

  it('counts queued until the head arrives, active while the answer streams, and notifies each crossing of 0', async () => {
    const runtime = scriptedRuntime();
    const crossings: string[] = [];
    // Changes that cross no 0: the second invocation queued behind the first.
    const moves: string[] = [];
    const runner = createInvocationRunner({
      baseUrl: sink.url,
      dispatcher: new Agent(),
      signedHeaders: async (_method, _path, _body, extra = {}) => ({ ...extra }),
      uplink: idleUplink(),
      runtime: () => ({ ok: true, handle: {} as RuntimeHandle, adapter: runtime.adapter }),
      onLoadChange: (assignmentId, edge) => void (edge ? crossings : moves).push(assignmentId),
      log,
    });
    expect(runner.load('asg_a')).toEqual({ queued: 0, active: 0, lastServedAt: null, latestDeadline: null });
    const first = invoke('asg_a');
    const second = { ...invoke('asg_a'), deadline: first.deadline + 5_000 };
    runner.run(first);
    runner.run(second);
    // Counted in the turn the invoke arrived: a drain starting now already sees both.
    expect(runner.load('asg_a')).toEqual({ queued: 2, active: 0, lastServedAt: null, latestDeadline: second.deadline });
    expect(crossings).toEqual(['asg_a']);
    await waitFor(() => runtime.calls.length === 2, 'both runtime calls');

    const body = new PassThrough();
    runtime.calls[0]!.answer(body);
    await waitFor(() => runner.load('asg_a').active === 1, 'the first head');
    expect(runner.load('asg_a')).toMatchObject({ queued: 1, active: 1 });
    expect(crossings).toEqual(['asg_a', 'asg_a']);

    // A runtime call that fails before its head was never served.
    runtime.calls[1]!.fail(new Error('connection refused'));
    await waitFor(() => sink.finished(second.invocationId), 'the failed call to be reported');
    expect(sink.frames(second.invocationId)).toEqual([
      { o: 0, t: 'accept' },
      { o: 1, t: 'error', code: 'runtime_unreachable', message: expect.any(String) },
    ]);
    await waitFor(() => runner.load('asg_a').queued === 0, 'the failed call to be counted out');
    expect(runner.load('asg_a')).toEqual({ queued: 0, active: 1, lastServedAt: null, latestDeadline: first.deadline });

    body.end('data: {"x":1}\n\ndata: [DONE]\n\n');
    await waitFor(() => runner.load('asg_a').active === 0, 'the answer to end');
    const idle = runner.load('asg_a');
    expect(idle).toMatchObject({ queued: 0, active: 0, latestDeadline: null });
    expect(Date.now() - idle.lastServedAt!).toBeLessThan(5_000);
    expect(crossings).toEqual(['asg_a', 'asg_a', 'asg_a', 'asg_a']);
    expect(moves).toEqual(['asg_a']);
    expect(sink.frames(first.invocationId).map((f) => f.t)).toEqual(['accept', 'head', 'data', 'end']);
    expect(runner.load('asg_b')).toEqual({ queued: 0, active: 0, lastServedAt: null, latestDeadline: null });
  });

  it('answers an invocation its runtime refuses with an error frame before any head, counting nothing', async () => {
    const crossings: string[] = [];
    const runner = createInvocationRunner({
      baseUrl: sink.url,
      dispatcher: new Agent(),
      signedHeaders: async (_method, _path, _body, extra = {}) => ({ ...extra }),
      uplink: idleUplink(),
      runtime: () => ({ ok: false, code: 'replica_draining', message: 'draining' }),
      onLoadChange: (assignmentId) => void crossings.push(assignmentId),
      log,
    });
    const call = invoke('asg_a');
    runner.run(call);
    expect(runner.load('asg_a')).toMatchObject({ queued: 0, active: 0 });
    await waitFor(() => sink.finished(call.invocationId), 'the refusal');
    expect(sink.frames(call.invocationId)).toEqual([
      { o: 0, t: 'accept' },
      { o: 1, t: 'error', code: 'replica_draining', message: 'draining' },
    ]);
    expect(crossings).toEqual([]);
  });
});
