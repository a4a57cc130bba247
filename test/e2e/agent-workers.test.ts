import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { simJobTemplate, startSimNode, stopSimNodes, type SimNode } from '../../functions/hosts/dev/fleet.js';
import type { WorkerAssignment } from '../../shared/contracts/desired.js';
import type { WorkerReport } from '../../shared/contracts/worker.js';
import { pidAlive } from '../../agent/runtimes/process-group.js';
import { startDesiredProxy, type DesiredProxy } from '../helpers/desired-proxy.js';
import { simJobs } from '../helpers/sim-jobs.js';
import { startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';

/** A sim job's process of `workerId`: its environment names it (RANK carries the id in these tests). */
async function jobOf(workerId: string): Promise<{ pid: number; uid: number; env: string[] } | null> {
  for (const pid of await simJobs()) {
    const env = (await readFile(`/proc/${pid}/environ`, 'utf8').catch(() => '')).split('\0');
    if (!env.includes(`RANK=${workerId}`)) continue;
    const status = await readFile(`/proc/${pid}/status`, 'utf8');
    return { pid, uid: Number(/^Uid:\s+(\d+)/m.exec(status)![1]), env };
  }
  return null;
}

describe('agent runs a run worker beside its runtimes (docs/runs.md)', () => {
  let plane: TestPlane;
  let proxy: DesiredProxy;
  let root: string;
  let node: SimNode;
  let before: number[];
  let job: Awaited<ReturnType<typeof simJobTemplate>>;

  const worker = (id: string, opts: { attempt?: number; phase?: 'prepare' | 'start'; sleepMs?: number; exitCode?: number; executable?: string }) =>
    ({
      workerId: id,
      runId: 'run_1',
      name: `run_1-${id}`,
      attempt: opts.attempt ?? 0,
      command: {
        kind: 'template',
        template: job.template,
        executable: opts.executable ?? job.executable,
        executableSha256: job.executableSha256,
        args: ['--sleep-ms', String(opts.sleepMs ?? 60_000), '--exit-code', String(opts.exitCode ?? 0)],
        // RANK carries the worker id so that the test finds its process.
        env: { RANK: id, LOCAL_RANK: '0', WORLD_SIZE: '2', MASTER_ADDR: '127.0.0.1', MASTER_PORT: '29500' },
        healthPath: '/health',
      },
      resources: { gpus: 0, cores: 1, memoryMiB: 64 },
      phase: opts.phase ?? 'start',
    }) satisfies WorkerAssignment;

  const report = (id: string, match: (r: WorkerReport) => boolean, what: string) =>
    waitFor(
      async () => {
        const found = proxy.lastHeartbeat()?.workers?.find((r) => r.workerId === id);
        return found && match(found) ? found : null;
      },
      { timeoutMs: 15_000, what },
    );

  beforeAll(async () => {
    before = await simJobs();
    job = await simJobTemplate();
    plane = await startTestPlane({ store: 'pglite' });
    proxy = await startDesiredProxy(plane);
    root = await mkdtemp(join(tmpdir(), 'lnx-workers-'));
    node = await startSimNode(plane, 'workers-node', root, { url: proxy.url });
    await waitFor(async () => proxy.lastHeartbeat(), { timeoutMs: 30_000, what: 'a first heartbeat' });
  });

  afterAll(async () => {
    if (node) await stopSimNodes([node]).catch(() => {});
    // A worker the agent left (a failing test) is ours to end.
    for (const pid of await simJobs()) if (!before.includes(pid)) process.kill(-pid, 'SIGKILL');
    await proxy?.close();
    await plane?.stop();
    if (root) await rm(root, { recursive: true, force: true });
  });

  it('prepares without spawning, starts as a uid of the range with the platform env, and reports the exit', async () => {
    await proxy.setWorkers([worker('wrk_ok', { phase: 'prepare', sleepMs: 1_500 })]);
    await report('wrk_ok', (r) => r.state === 'ready-to-start', 'wrk_ok ready to start');
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(await jobOf('wrk_ok')).toBeNull();

    await proxy.setWorkers([worker('wrk_ok', { sleepMs: 1_500 })]);
    const running = await waitFor(() => jobOf('wrk_ok'), { timeoutMs: 10_000, what: 'the wrk_ok process' });
    const policy = JSON.parse(await readFile(join(node.stateDir, 'policy.json'), 'utf8')) as { runAs?: { uids: { first: number; count: number } } };
    if (policy.runAs) {
      expect(running.uid).toBeGreaterThanOrEqual(policy.runAs.uids.first);
      expect(running.uid).toBeLessThan(policy.runAs.uids.first + policy.runAs.uids.count);
    }
    expect(running.env).toEqual(expect.arrayContaining(['RANK=wrk_ok', 'WORLD_SIZE=2', 'MASTER_PORT=29500', 'CUDA_VISIBLE_DEVICES=']));
    const done = await report('wrk_ok', (r) => r.state === 'completed', 'wrk_ok completed');
    expect(done).toMatchObject({ attempt: 0, exitCode: 0, message: null });
    expect((await proxy.logs('wrk_ok', 10)).join('\n')).toContain('sim-job exiting with 0');
    expect(proxy.lastHeartbeat()?.address).not.toBeUndefined();
  });

  it('fails a worker that exits 3, and one the local policy refuses, with a message', async () => {
    await proxy.setWorkers([worker('wrk_bad', { sleepMs: 100, exitCode: 3 }), worker('wrk_sh', { executable: '/bin/sh' })]);
    expect(await report('wrk_bad', (r) => r.state === 'failed', 'wrk_bad failed')).toMatchObject({ exitCode: 3 });
    const refused = await report('wrk_sh', (r) => r.state === 'failed', 'wrk_sh refused');
    expect(refused.message).toBe(`refused by local policy: template "sim-job" must run ${job.executable}, not /bin/sh`);
    expect(await jobOf('wrk_sh')).toBeNull();
  });

  it('replaces the process for a new attempt and stops a worker that leaves the desired state', async () => {
    await proxy.setWorkers([worker('wrk_long', {})]);
    const first = await waitFor(() => jobOf('wrk_long'), { timeoutMs: 10_000, what: 'attempt 0' });
    await proxy.setWorkers([worker('wrk_long', { attempt: 1 })]);
    await report('wrk_long', (r) => r.attempt === 1 && r.state === 'running', 'attempt 1 running');
    const second = await jobOf('wrk_long');
    expect(second?.pid).not.toBe(first.pid);
    expect(pidAlive(first.pid)).toBe(false);

    await proxy.setWorkers([]);
    await waitFor(async () => !pidAlive(second!.pid), { timeoutMs: 15_000, what: 'attempt 1 stopped' });
    await waitFor(async () => proxy.lastHeartbeat()?.workers?.length === 0, { timeoutMs: 5_000, what: 'no worker reported' });
  });

  it('after an agent restart adopts a running worker, reports a dead one, and stops one no longer desired', async () => {
    await proxy.setWorkers([worker('wrk_keep', {}), worker('wrk_dead', {}), worker('wrk_gone', {})]);
    const keep = await waitFor(() => jobOf('wrk_keep'), { timeoutMs: 10_000, what: 'wrk_keep' });
    const dead = await waitFor(() => jobOf('wrk_dead'), { timeoutMs: 10_000, what: 'wrk_dead' });
    const gone = await waitFor(() => jobOf('wrk_gone'), { timeoutMs: 10_000, what: 'wrk_gone' });
    await report('wrk_gone', (r) => r.state === 'running', 'all three running');

    // Killed outright: it stops nothing, as after a crash.
    node.process.kill('SIGKILL');
    await new Promise((resolve) => node.process.once('exit', resolve));
    process.kill(-dead.pid, 'SIGKILL');
    await proxy.setWorkers([worker('wrk_keep', {}), worker('wrk_dead', {})]);
    const bootId = proxy.lastHeartbeat()!.bootId;
    node = await startSimNode(plane, 'workers-node', root, { url: proxy.url });
    await waitFor(async () => proxy.lastHeartbeat()?.bootId !== bootId, { timeoutMs: 30_000, what: 'the new agent heartbeating' });

    expect(await report('wrk_dead', (r) => r.state === 'failed', 'wrk_dead not found')).toMatchObject({ message: 'process not found', exitCode: null });
    expect(await report('wrk_keep', (r) => r.state === 'running', 'wrk_keep adopted')).toMatchObject({ attempt: 0 });
    expect((await jobOf('wrk_keep'))?.pid).toBe(keep.pid);
    await waitFor(async () => !pidAlive(gone.pid), { timeoutMs: 15_000, what: 'wrk_gone stopped' });

    // Stopping the node (--stop-runtimes-on-exit) stops its workers too.
    await stopSimNodes([node]);
    expect(pidAlive(keep.pid)).toBe(false);
    expect((await simJobs()).filter((pid) => !before.includes(pid))).toEqual([]);
  });
});
