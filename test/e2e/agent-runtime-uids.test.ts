import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { closeSync, openSync } from 'node:fs';
import { cp, mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { eq } from 'drizzle-orm';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { uidRangeProblem, type UidRange } from '../../agent/runtime-user.js';
import { pidAlive } from '../../agent/runtimes/process-group.js';
import { seedDemoDeployment, spawnAgent, waitForExit } from '../../functions/hosts/dev/fleet.js';
import { createEnrollmentToken } from '../../functions/services/enrollment.js';
import { runtimeReports } from '../../functions/store/schema/index.js';
import { startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';

const root = process.getuid?.() === 0;

/** A few uids no account holds, in the block systemd leaves unused; random, so that test runs side by side rarely meet. */
async function freeRange(count: number): Promise<UidRange> {
  for (;;) {
    const range = { first: 2_100_000_000 + randomInt(0, 2_000_000) * 16, count };
    if ((await uidRangeProblem(range)) === null) return range;
  }
}

/** The uids of a process (real, effective, saved, file system), from /proc. */
async function uidsOf(pid: number): Promise<number[]> {
  return /^Uid:\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)/m
    .exec(await readFile(`/proc/${pid}/status`, 'utf8'))!
    .slice(1)
    .map(Number);
}

interface RuntimeRecord {
  assignmentId: string;
  pid: number;
  uid: number | null;
}

/**
 * Security review L5: with a range of uids in its local policy, a real agent (root) runs each simulated runtime as a
 * uid of its own, so that no runtime reads another's environment (its secrets) or signals it, and hands a uid out
 * again once its runtime is gone. And the review's related bug: the simulator starts even where its user cannot read
 * the agent's code (a clone under /root, run through npx's link in /root/.npm).
 */
describe.skipIf(!root)('runtimes each run as a uid of their own (root only: only root switches users)', () => {
  let plane: TestPlane;
  let agent: ChildProcess | undefined;
  let privateDir: string | undefined;

  beforeAll(async () => {
    plane = await startTestPlane({ store: 'pglite' });
  });
  afterEach(async () => {
    if (agent && agent.exitCode === null && agent.signalCode === null) {
      agent.kill('SIGTERM');
      await waitForExit(agent, 30_000).catch(() => agent!.kill('SIGKILL'));
    }
    agent = undefined;
    if (privateDir) await rm(privateDir, { recursive: true, force: true });
    privateDir = undefined;
  });
  afterAll(async () => {
    await plane?.stop();
  });

  /** Enrolls a node labelled `uids=<label>` and writes its local policy: the simulator, each runtime a uid of `range`. */
  async function node(label: string, range: UidRange) {
    const stateDir = join(plane.dataDir, 'nodes', label);
    await mkdir(stateDir, { recursive: true, mode: 0o700 });
    const logFile = join(stateDir, 'agent.log');
    const token = await createEnrollmentToken({
      ctx: plane.systemCtx,
      input: { workspaceId: plane.workspaceId, name: `uids-${label}`, labels: { uids: label }, ttlSeconds: 300 },
    });
    const enroll = spawnAgent(['enroll', '--url', plane.url, '--token', '-', '--name', `uids-${label}`, '--state-dir', stateDir], {
      logFile,
      env: { LUNANEXA_ENROLLMENT_TOKEN: token.token },
    });
    expect(await waitForExit(enroll, 60_000)).toBe(0);
    const { machineId } = JSON.parse(await readFile(join(stateDir, 'identity.json'), 'utf8')) as { machineId: string };
    const policy = join(stateDir, 'policy.json');
    await writeFile(policy, JSON.stringify({ simulated: true, runAs: { uids: range, group: range.first } }), { mode: 0o600 });
    const readyRuntimes = async () =>
      (await plane.ports.store.db.select().from(runtimeReports).where(eq(runtimeReports.machineId, machineId))).filter((row) => row.state === 'ready');
    const records = async (): Promise<RuntimeRecord[]> => {
      const names = (await readdir(join(stateDir, 'runtimes'))).filter((name) => name.endsWith('.json'));
      return await Promise.all(names.map(async (name) => JSON.parse(await readFile(join(stateDir, 'runtimes', name), 'utf8')) as RuntimeRecord));
    };
    return { stateDir, logFile, policy, readyRuntimes, records };
  }

  /** The deployment of `label`'s node: `replicas` simulated runtimes, all on that one node. */
  const deploy = (label: string, replicas: number) =>
    seedDemoDeployment(plane, replicas, {}, { name: `uids-${label}`, model: `uids-${label}`, selector: { uids: label }, replicasPerMachine: 2 });

  /** What a process running as `ids` meets when it reads `pid`'s environment and signals it (signal 0: no harm done). */
  function tryFrom(ids: { uid: number; gid: number }, pid: number): { environ: string; kill: string } {
    const probe = `
      const attempt = (act) => { try { act(); return 'allowed'; } catch (error) { return error.code; } };
      console.log(JSON.stringify({
        environ: attempt(() => require('node:fs').readFileSync('/proc/${pid}/environ')),
        kill: attempt(() => process.kill(${pid}, 0)),
      }));`;
    const result = spawnSync(process.execPath, ['-e', probe], { ...ids, cwd: '/', encoding: 'utf8', timeout: 30_000 });
    return JSON.parse(result.stdout) as { environ: string; kill: string };
  }

  it('gives two runtimes two uids of the range: neither reads the other’s environment nor signals it; a stopped one’s uid is handed out again', async () => {
    const range = await freeRange(2);
    const gid = range.first;
    const n = await node('pair', range);
    await deploy('pair', 2);
    agent = spawnAgent(['run', '--state-dir', n.stateDir, '--policy', n.policy, '--stop-runtimes-on-exit'], { logFile: n.logFile });
    await waitFor(async () => (await n.readyRuntimes()).length === 2, { timeoutMs: 60_000, what: 'two ready runtimes' });

    const [a, b] = await n.records();
    expect(a!.uid).not.toBe(b!.uid);
    for (const runtime of [a!, b!]) {
      expect([range.first, range.first + 1]).toContain(runtime.uid);
      // Switched for good: real, effective, saved and file-system uid alike.
      expect(await uidsOf(runtime.pid)).toEqual(Array(4).fill(runtime.uid));
    }
    // The agent (root) reads B's environment; A, running as its own uid, can neither read it nor signal B.
    expect(await readFile(`/proc/${b!.pid}/environ`, 'utf8')).toContain('LUNANEXA_RUNTIME_TOKEN=');
    expect(tryFrom({ uid: a!.uid!, gid }, b!.pid)).toEqual({ environ: 'EACCES', kill: 'EPERM' });
    expect(tryFrom({ uid: b!.uid!, gid }, a!.pid)).toEqual({ environ: 'EACCES', kill: 'EPERM' });
    // Each its own home, in the state dir its group may pass through.
    for (const runtime of [a!, b!]) {
      const home = await stat(join(n.stateDir, 'homes', String(runtime.uid)));
      expect({ uid: home.uid, mode: home.mode & 0o777 }).toEqual({ uid: runtime.uid, mode: 0o700 });
    }

    await deploy('pair', 1);
    const [kept] = await waitFor(async () => ((await n.records()).length === 1 ? await n.records() : null), { what: 'one runtime stopped' });
    const gone = [a!, b!].find((runtime) => runtime.assignmentId !== kept!.assignmentId)!;
    await waitFor(async () => !pidAlive(gone.pid), { what: 'the stopped runtime to exit' });

    // Both uids of the range held again: the new runtime can only have the one the stopped runtime gave back.
    await deploy('pair', 2);
    await waitFor(async () => (await n.readyRuntimes()).length === 2 && (await n.records()).length === 2, {
      timeoutMs: 60_000,
      what: 'two ready runtimes again',
    });
    const fresh = (await n.records()).find((runtime) => runtime.assignmentId !== kept!.assignmentId)!;
    expect(fresh.uid).toBe(gone.uid);
    expect(await uidsOf(fresh.pid)).toEqual(Array(4).fill(gone.uid));

    const running = await n.records();
    agent.kill('SIGTERM');
    expect(await waitForExit(agent, 30_000)).toBe(0);
    await waitFor(async () => running.every((runtime) => !pidAlive(runtime.pid)), { what: 'every runtime stopped' });
  });

  it('refuses to start with a range that holds an account’s uid, saying whose', async () => {
    // The policy is read before anything is dialled: an identity on disk is all it takes to get there.
    const stateDir = join(plane.dataDir, 'nodes', 'overlap');
    await mkdir(stateDir, { recursive: true, mode: 0o700 });
    const identity = { url: 'http://127.0.0.1:9', name: 'n', machineId: 'm', workspaceId: 'w', clusterId: 'c', credentialId: 'k' };
    await writeFile(
      join(stateDir, 'identity.json'),
      JSON.stringify({ ...identity, credentialIssuedAt: '', credentialExpiresAt: '', jwks: { keys: [] }, heartbeatIntervalMs: 20_000 }),
      { mode: 0o600 },
    );
    const policy = join(stateDir, 'policy.json');
    await writeFile(policy, JSON.stringify({ simulated: true, runAs: { uids: { first: 65_530, count: 8 }, group: 2_100_000_000 } }), { mode: 0o600 });
    const logFile = join(stateDir, 'agent.log');
    agent = spawnAgent(['run', '--state-dir', stateDir, '--policy', policy], { logFile });
    expect(await waitForExit(agent, 30_000)).toBe(1);
    expect(await readFile(logFile, 'utf8')).toContain("the local policy's runAs uids 65530-65537 are not the agent's own: uid 65534 is nobody's");
  });

  it('starts the simulator from a checkout its runtime user cannot read (a clone under /root, run through its bin)', async () => {
    // A private copy of the agent's code (0700, as /root is); its dependencies stay where they are.
    privateDir = await mkdtemp(join(tmpdir(), 'lnx-private-clone-'));
    const clone = join(privateDir, 'lunanexa');
    for (const path of ['agent', 'sim', 'shared', 'bin', 'package.json', 'tsconfig.json']) await cp(resolve(path), join(clone, path), { recursive: true });
    await symlink(resolve('node_modules'), join(clone, 'node_modules'));
    expect((await stat(privateDir)).mode & 0o777).toBe(0o700);

    const range = await freeRange(1);
    const n = await node('private', range);
    await deploy('private', 1);
    const log = openSync(n.logFile, 'a', 0o600);
    agent = spawn(
      process.execPath,
      [join(clone, 'bin', 'lunanexa-agent.mjs'), 'run', '--state-dir', n.stateDir, '--policy', n.policy, '--stop-runtimes-on-exit'],
      {
        cwd: clone,
        stdio: ['ignore', log, log],
      },
    );
    closeSync(log);
    await waitFor(async () => (await n.readyRuntimes()).length === 1, { timeoutMs: 45_000, what: 'the simulated runtime to be ready' });
    const [runtime] = await n.records();
    expect(await uidsOf(runtime!.pid)).toEqual(Array(4).fill(range.first));
    // Its code was loaded as root, from where its user cannot look.
    expect(spawnSync('/usr/bin/test', ['-r', join(clone, 'agent', 'main.ts')], { uid: range.first, gid: range.first }).status).toBe(1);

    agent.kill('SIGTERM');
    expect(await waitForExit(agent, 30_000)).toBe(0);
    await waitFor(async () => !pidAlive(runtime!.pid), { what: 'the runtime stopped' });
  });
});
