import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { workerLogPath } from '../../agent/workers/records.js';
import { ensureJobTemplates, startSimNode, type SimNode } from '../../functions/hosts/dev/fleet.js';
import { buildCli, runCli } from '../helpers/cli.js';
import { STEADY_LIVENESS, startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';
import { newSimJobs, readyMachines, runsApi, simJob, stopRunFleet } from '../helpers/runs.js';
import { simJobs } from '../helpers/sim-jobs.js';

/** Four simulated nodes of one GB10 each: a run of four 1-GPU workers takes one worker per machine. */
const NODES = ['run-a', 'run-b', 'run-c', 'run-d'];

/**
 * Runs with real parts and no proxy: a real plane with the sim-job template registered as `npm start` does, real
 * agent processes on four simulated nodes, runs submitted over the API and with the CLI (its own process).
 */
describe('runs on simulated nodes, end to end (docs/runs.md)', () => {
  let plane: TestPlane;
  let nodes: SimNode[] = [];
  let dir: string;
  let cli: string;
  let env: Record<string, string>;
  let before: number[];

  const lunanexa = (...args: string[]) => runCli(cli, args, env);
  const { submit, show, until } = runsApi(() => plane);
  const ours = () => newSimJobs(before, dir);

  beforeAll(async () => {
    before = await simJobs();
    plane = await startTestPlane({ config: STEADY_LIVENESS });
    await ensureJobTemplates(plane);
    dir = await mkdtemp(join(tmpdir(), 'lnx-runs-'));
    [cli, nodes] = await Promise.all([buildCli(dir), Promise.all(NODES.map((name) => startSimNode(plane, name, join(dir, 'nodes'))))]);
    env = { LUNANEXA_URL: plane.url, LUNANEXA_TOKEN: plane.adminToken, HOME: dir, LUNANEXA_CONFIG: join(dir, 'login.json') };
    const machines = await readyMachines(plane, NODES);
    // As `npm start`'s nodes: each declares one simulated GB10 with unified memory.
    for (const m of machines) expect(m.inventory.gpus).toEqual([expect.objectContaining({ index: 0, name: 'NVIDIA GB10', unifiedMemory: true })]);
  }, 180_000);

  afterAll(() => stopRunFleet({ nodes, before, dir, plane }));

  it('starts a gang of four workers, one per machine, within a second of each other, and completes it', async () => {
    const run = await submit({ name: 'gang', spec: { ...simJob(1_500), workers: 4, resources: { gpus: 1 }, gang: {} } });
    const done = await until(run.id, (r) => r.state === 'completed' || r.state === 'failed', 'the gang run to end');
    expect(done).toMatchObject({ state: 'completed', workerCount: 4 });
    expect(new Set(done.workers.map((w) => w.machineId)).size).toBe(4);
    expect(done.workers.every((w) => w.state === 'completed' && w.exitCode === 0 && w.attempt === 0)).toBe(true);
    // Every worker reached running; the barrier released all four in one decision, and their agents started them together.
    const at = (to: string) => done.events.filter((e) => e.workerId !== null && e.to === to).map((e) => Date.parse(e.at));
    const running = at('running');
    expect(running).toHaveLength(4);
    const spread = Math.max(...running) - Math.min(...running);
    console.log(`gang of four: running reported within ${spread} ms of each other, as the control plane recorded them`);
    expect(spread).toBeLessThanOrEqual(1_000);
    expect(done.events.filter((e) => e.to === 'starting' && e.origin === 'controller' && e.workerId !== null)).toHaveLength(4);
    expect(done.events.some((e) => e.reason.startsWith('gang assembled'))).toBe(true);
  }, 90_000);

  it('restarts a worker that exits non-zero under restart-worker (attempt 1), and fails the run under fail', async () => {
    const restarting = await submit({
      name: 'restarts',
      spec: { ...simJob(100, 3), workers: 1, failurePolicy: { action: 'restart-worker', maxRestarts: 1, backoff: { initialMs: 100, maxMs: 100 } } },
    });
    const failing = await submit({ name: 'fails', spec: { ...simJob(100, 3), workers: 1 } });

    const restarted = await until(restarting.id, (r) => r.state === 'failed', 'the restarting run to give up');
    expect(restarted.workers[0]).toMatchObject({ attempt: 1, restarts: 1, exitCode: 3 });
    const moves = restarted.events.filter((e) => e.workerId !== null).map((e) => `${e.from}>${e.to}`);
    // Failed, restarted (attempt 1), failed again (a job this short may end before its agent reports it running).
    expect(moves.filter((m) => m.endsWith('>failed'))).toHaveLength(2);
    expect(moves.indexOf('failed>pending')).toBeGreaterThan(moves.findIndex((m) => m.endsWith('>failed')));
    expect(restarted.events.find((e) => e.from === 'failed' && e.to === 'pending')?.reason).toBe('restart 1 of 1');
    expect(restarted.reason).toMatch(/exited with code 3; restart limit 1 reached/);

    const failed = await until(failing.id, (r) => r.state === 'failed', 'the failing run to fail');
    expect(failed.reason).toMatch(/exited with code 3; failure policy: fail/);
    expect(failed.workers[0]).toMatchObject({ attempt: 0, exitCode: 3 });
    // Released with its run, its log stays on its machine: what the job printed before it failed, read afterwards.
    const { data, response } = await plane.api.GET('/runs/{id}/workers/{rank}/logs', { params: { path: { id: failing.id, rank: '0' } } });
    expect(response.status).toBe(200);
    expect(data).toMatchObject({ workerId: failed.workers[0]!.id, machineId: failed.workers[0]!.machineId });
    expect(data!.lines[0]).toMatch(/^sim-job uid=\d+ RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 /);
    expect(data!.lines.at(-1)).toBe('sim-job exiting with 3');
  }, 90_000);

  it('with the CLI: submits a gang from YAML, lists and shows it, tails a worker, cancels it, and its processes stop', async () => {
    await writeFile(
      join(dir, 'long.yaml'),
      ['name: long', 'spec:', '  template: sim-job', '  params: { sleep_ms: 60000 }', '  workers: 4', '  resources: { gpus: 1 }', '  gang: {}', ''].join('\n'),
    );
    const submitted = await lunanexa('runs', 'submit', '-f', join(dir, 'long.yaml'));
    expect(submitted.stderr).toBe('');
    expect(submitted.stdout).toMatch(/^long: submitted as run_\w+, /);
    const id = /run_\w+/.exec(submitted.stdout)![0];
    await until(id, (r) => r.state === 'running', 'the long run running');
    await waitFor(async () => (await ours()).length === 4, { timeoutMs: 10_000, what: 'four sim jobs' });

    const listed = await lunanexa('runs', 'ls');
    expect(listed.stdout.split('\n')[0]).toMatch(/^NAME\s+STATE\s+WORKERS\s+PRIORITY\s+QUEUE/);
    expect(listed.stdout).toMatch(/long\s+running\s+4\s+0\s+-/);
    const shown = await lunanexa('runs', 'show', 'long');
    expect(shown.stderr).toBe('');
    expect(shown.stdout).toMatch(/state:\s+running/);
    for (const name of NODES) expect(shown.stdout).toContain(name);
    expect(shown.stdout).toMatch(/long-3\s+run-\w\s+running\s+0\s+-/);
    expect(shown.stdout).toContain('gang assembled');
    const logs = await lunanexa('runs', 'logs', 'long', '--rank', '2');
    expect(logs.stdout).toMatch(/sim-job uid=\d+ RANK=2 LOCAL_RANK=0 WORLD_SIZE=4 MASTER_ADDR=\S+ MASTER_PORT=29500 CUDA_VISIBLE_DEVICES=0/);

    const cancelled = await lunanexa('runs', 'cancel', 'long');
    expect(cancelled.stdout).toBe('long: cancelled; its machines stop its workers\n');
    await waitFor(async () => (await ours()).length === 0, { timeoutMs: 30_000, what: 'the sim jobs stopped' });
    const ended = await show(id);
    expect(ended).toMatchObject({ state: 'failed', reason: 'cancelled' });
    // Released with its workers, its logs stay on their machines: still readable once the run ended.
    const kept = await lunanexa('runs', 'logs', id, '--rank', '2');
    expect(kept.stderr).toBe('');
    expect(kept.stdout).toMatch(/sim-job uid=\d+ RANK=2 LOCAL_RANK=0 WORLD_SIZE=4 /);
    // A node that no longer has a released worker's log (deleted here by hand, as its bound would) says so: 404.
    const last = ended.workers.find((w) => w.rank === 3)!;
    for (const node of nodes) await rm(workerLogPath(node.stateDir, last.id), { force: true });
    const gone = await lunanexa('runs', 'logs', id, '--rank', '3');
    expect(gone.code).toBe(1);
    expect(gone.stderr).toMatch(/HTTP 404: worker long-3 was released and its machine no longer keeps its log/);
  }, 120_000);
});
