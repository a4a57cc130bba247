import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureJobTemplates, startSimNode, stopSimNodes, type SimNode } from '../../functions/hosts/dev/fleet.js';
import type { RunDetail } from '../../shared/contracts/run-view.js';
import { pidAlive } from '../../agent/runtimes/process-group.js';
import { STEADY_LIVENESS, startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';
import { newSimJobs, readyMachines, runsApi, simJob, workerProcess } from '../helpers/runs.js';
import { simJobs } from '../helpers/sim-jobs.js';

const NODE = 'workers-node';
/** The gang's second machine in the first test, stopped (SIGSTOP) while the node prepares; cordoned after it. */
const PEER = 'workers-peer';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The agent's worker supervisor (docs/runs.md, "On the node") driven by the real plane: runs submitted over the
 * management API, placed and signed into the node's desired state by the controller, run by a real agent process.
 */
describe('agent runs a run worker beside its runtimes (docs/runs.md)', () => {
  let plane: TestPlane;
  let root: string;
  let node: SimNode;
  let peer: SimNode | undefined;
  let nodeId: string;
  let before: number[];
  const { submit, show, until, cancel } = runsApi(() => plane);

  /** The process of `run`'s worker of `rank` on the node under test. */
  const processOf = (run: RunDetail, rank: number) => workerProcess(node.stateDir, run.workers.find((w) => w.rank === rank)!.id);
  const started = (run: RunDetail, rank: number, what: string) => waitFor(() => processOf(run, rank), { timeoutMs: 15_000, what });

  beforeAll(async () => {
    before = await simJobs();
    plane = await startTestPlane({ config: STEADY_LIVENESS });
    await ensureJobTemplates(plane);
    root = await mkdtemp(join(tmpdir(), 'lnx-workers-'));
    [node, peer] = await Promise.all([startSimNode(plane, NODE, root), startSimNode(plane, PEER, root)]);
    nodeId = (await readyMachines(plane, [NODE, PEER]))[0]!.id;
  }, 120_000);

  afterAll(async () => {
    peer?.process.kill('SIGCONT');
    await stopSimNodes([node, peer].filter((n): n is SimNode => n !== undefined)).catch(() => {});
    // A worker the agent left (a failing test) is ours to end.
    if (root) for (const pid of await newSimJobs(before ?? [], root)) process.kill(-pid, 'SIGKILL');
    await plane?.stop();
    if (root) await rm(root, { recursive: true, force: true });
  });

  it('prepares without spawning, starts as a uid of the range with the platform env, and reports the exit', async () => {
    // A gang of two 1-GPU workers takes both machines (one GPU each); the peer, stopped, never reports its worker
    // ready, so the node's worker is told only `prepare` and waits ready to start.
    peer!.process.kill('SIGSTOP');
    let run: RunDetail;
    try {
      run = await submit({ name: 'gang', spec: { ...simJob(2_500), workers: 2, resources: { gpus: 1 }, gang: {} } });
      run = await until(run.id, (r) => r.workers.some((w) => w.machineId === nodeId && w.state === 'ready-to-start'), 'the node ready to start', 15_000);
      await sleep(500);
      expect(await newSimJobs(before, root)).toEqual([]);
      expect((await show(run.id)).workers.find((w) => w.machineId === nodeId)).toMatchObject({ state: 'ready-to-start', phase: 'prepare' });
    } finally {
      peer!.process.kill('SIGCONT');
    }

    const rank = run.workers.find((w) => w.machineId === nodeId)!.rank;
    const running = await started(run, rank, 'the node worker process');
    const policy = JSON.parse(await readFile(join(node.stateDir, 'policy.json'), 'utf8')) as { runAs?: { uids: { first: number; count: number } } };
    if (policy.runAs) {
      expect(running.uid).toBeGreaterThanOrEqual(policy.runAs.uids.first);
      expect(running.uid).toBeLessThan(policy.runAs.uids.first + policy.runAs.uids.count);
    }
    // MASTER_ADDR: rank 0's machine's address, as its agent reports it.
    const masterAddr = running.env.find((e) => e.startsWith('MASTER_ADDR='));
    expect(masterAddr).toMatch(/^MASTER_ADDR=\S+$/);
    expect(running.env).toEqual(expect.arrayContaining([`RANK=${rank}`, 'WORLD_SIZE=2', 'MASTER_PORT=29500', 'CUDA_VISIBLE_DEVICES=0']));
    // What the job printed, read from its node through the plane while the worker is held there.
    const logs = await waitFor(
      async () => {
        const { data } = await plane.api.GET('/runs/{id}/workers/{rank}/logs', { params: { path: { id: run.id, rank: String(rank) } } });
        return data?.lines.length ? data : null;
      },
      { timeoutMs: 10_000, what: 'the worker log' },
    );
    expect(logs.lines[0]).toBe(`sim-job uid=${running.uid} RANK=${rank} LOCAL_RANK=0 WORLD_SIZE=2 ${masterAddr} MASTER_PORT=29500 CUDA_VISIBLE_DEVICES=0`);

    const done = await until(run.id, (r) => r.state === 'completed' || r.state === 'failed', 'the gang to end');
    expect(done.state).toBe('completed');
    expect(done.workers.find((w) => w.machineId === nodeId)).toMatchObject({ state: 'completed', attempt: 0, exitCode: 0, message: null });

    // From here on every run is the node's alone.
    const peerId = done.workers.find((w) => w.machineId !== nodeId)!.machineId!;
    const { response } = await plane.api.POST('/machines/{id}/cordon', { params: { path: { id: peerId } } });
    expect(response.ok).toBe(true);
    await stopSimNodes([peer!]);
    peer = undefined;
  }, 60_000);

  it('fails a worker that exits 3, and one the local policy refuses, with a message', async () => {
    // A template the plane accepts but the node's policy does not list: /bin/sh, pinned by its digest.
    const executableSha256 = createHash('sha256')
      .update(await readFile('/bin/sh'))
      .digest('hex');
    const { response } = await plane.api.PUT('/runtime-templates/{name}', {
      params: { path: { name: 'sh-job' } },
      body: { executable: '/bin/sh', executableSha256, args: ['-c', 'exit 0'], params: {}, env: [], healthPath: '/health', description: '' },
    });
    expect(response.ok).toBe(true);

    const bad = await submit({ name: 'bad', spec: { ...simJob(100, 3), workers: 1, resources: { gpus: 0 } } });
    const refused = await submit({ name: 'sh', spec: { template: 'sh-job', workers: 1, resources: { gpus: 0 } } });
    const failed = await until(bad.id, (r) => r.state === 'failed', 'bad to fail');
    expect(failed.workers[0]).toMatchObject({ machineId: nodeId, state: 'failed', exitCode: 3 });
    const shFailed = await until(refused.id, (r) => r.state === 'failed', 'sh to be refused');
    expect(shFailed.workers[0]).toMatchObject({
      machineId: nodeId,
      state: 'failed',
      exitCode: null,
      message: 'refused by local policy: template "sh-job" is not allowed',
    });
    expect(await newSimJobs(before, root)).toEqual([]);
  }, 60_000);

  it('replaces the process for a new attempt and stops a worker that leaves the desired state', async () => {
    // A gang restarts whole: when one worker's process dies, the other's (still running) is replaced too.
    const run = await submit({
      name: 'restarts',
      spec: {
        ...simJob(60_000),
        workers: 2,
        resources: { gpus: 0 },
        gang: {},
        failurePolicy: { action: 'restart-worker', maxRestarts: 1, backoff: { initialMs: 100, maxMs: 100 } },
      },
    });
    const first = await until(run.id, (r) => r.state === 'running', 'attempt 0 running');
    const [zero, one] = [await started(first, 0, 'rank 0'), await started(first, 1, 'rank 1')];
    process.kill(one.pid, 'SIGKILL');

    const second = await until(run.id, (r) => r.state === 'running' && r.restarts === 1, 'the gang running again');
    expect(second.workers.map((w) => w.attempt)).toEqual([1, 1]);
    expect(second.events.some((e) => e.to === 'pending' && e.reason.includes('a gang restarts as a whole'))).toBe(true);
    const replaced = await started(second, 0, 'rank 0 again');
    expect(replaced.pid).not.toBe(zero.pid);
    expect(pidAlive(zero.pid)).toBe(false);
    const again = await started(second, 1, 'rank 1 again');

    await cancel(run.id);
    await waitFor(async () => !pidAlive(replaced.pid) && !pidAlive(again.pid), { timeoutMs: 15_000, what: 'both stopped' });
    expect(await show(run.id)).toMatchObject({ state: 'failed', reason: 'cancelled' });
    expect(await newSimJobs(before, root)).toEqual([]);
  }, 60_000);

  it('after an agent restart adopts a running worker, reports a dead one, and stops one no longer desired', async () => {
    const long = { ...simJob(60_000), workers: 1, resources: { gpus: 0 } };
    const submitted = await Promise.all(['keep', 'dead', 'gone'].map((name) => submit({ name, spec: long })));
    const [keep, dead, gone] = await Promise.all(submitted.map((r) => until(r.id, (d) => d.state === 'running', `${r.name} running`)));
    const [keepJob, deadJob, goneJob] = await Promise.all([keep!, dead!, gone!].map((r) => started(r, 0, r.name)));

    // Killed outright: it stops nothing, as after a crash. While it is down one worker's process dies and another's
    // run is cancelled.
    node.process.kill('SIGKILL');
    await new Promise((resolve) => node.process.once('exit', resolve));
    process.kill(-deadJob!.pid, 'SIGKILL');
    await cancel(gone!.id);
    node = await startSimNode(plane, NODE, root);

    const deadEnd = await until(dead!.id, (r) => r.state === 'failed', 'dead to fail');
    expect(deadEnd.workers[0]).toMatchObject({ state: 'failed', message: 'process not found', exitCode: null, attempt: 0 });
    expect(deadEnd.reason).toMatch(/process not found; failure policy: fail/);
    expect((await until(keep!.id, (r) => r.workers[0]!.state === 'running', 'keep adopted')).workers[0]).toMatchObject({ attempt: 0 });
    expect((await processOf(keep!, 0))?.pid).toBe(keepJob!.pid);
    await waitFor(async () => !pidAlive(goneJob!.pid), { timeoutMs: 15_000, what: 'gone stopped' });

    // Stopping the node (--stop-runtimes-on-exit) stops its workers too.
    await stopSimNodes([node]);
    expect(pidAlive(keepJob!.pid)).toBe(false);
    expect(await newSimJobs(before, root)).toEqual([]);
  }, 90_000);
});
