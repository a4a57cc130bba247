import type { MachineView } from '../../shared/contracts/machine.js';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { decodeJwt } from 'jose';
import { eq, inArray, sql } from 'drizzle-orm';
import { assignments, machines, runHolds, runs, runWorkers } from '../../functions/store/schema/index.js';
import { pruneRunHolds } from '../../functions/services/run-holds.js';
import type { DeploymentDetail } from '../../shared/contracts/deployment.js';
import { signDesiredState } from '../../functions/services/streams.js';
import { putRuntimeTemplate } from '../../functions/services/runtime-templates.js';
import type { WorkerAssignment } from '../../shared/contracts/desired.js';
import type { WorkerReport } from '../../shared/contracts/worker.js';
import { RunQueueStanding, type RunDetail } from '../../shared/contracts/run-view.js';
import { startTestPlane, STEADY_LIVENESS, type TestPlane } from '../helpers/plane.js';
import { enrollTestMachine, heartbeatBody, TEST_INVENTORY, type TestMachine, testGpu } from '../helpers/machine.js';

/**
 * Runs end to end on a real plane (PGlite): submitted over the API, queued with a reason, placed with reservations
 * when a machine has room, carried to the machines as workers in their signed desired state with their environment,
 * and followed from the workers' reports in real signed heartbeats to completion, failure, restart or cancel.
 */
/** Drives a plane's runs by hand: signed heartbeats with worker reports, passes, the API, the signed desired state. */
function harness(planeOf: () => TestPlane) {
  const seq = new Map<string, number>();
  async function beat(machine: TestMachine, workers: WorkerReport[] = [], address: string | null = null) {
    const next = (seq.get(machine.machineId) ?? 0) + 1;
    seq.set(machine.machineId, next);
    const response = await machine.request('POST', '/agent/v1/heartbeat', heartbeatBody(machine, next, { workers, address }));
    expect(response.status).toBe(200);
  }
  const reconcile = () => planeOf().systemCtx.afterWrite();
  const submit = async (name: string, spec: Record<string, unknown>) => {
    const response = await planeOf().admin('/api/v1/runs', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ name, spec }),
    });
    return { status: response.status, body: (await response.json()) as RunDetail & { error?: { code: string; message: string } } };
  };
  const show = async (id: string) => (await (await planeOf().admin(`/api/v1/runs/${id}`)).json()) as RunDetail;
  const desiredWorkers = async (machine: TestMachine) =>
    (
      decodeJwt((await signDesiredState({ ctx: planeOf().systemCtx, input: { machineId: machine.machineId } })).jws) as unknown as {
        workers: WorkerAssignment[];
      }
    ).workers;
  const report = (w: WorkerAssignment, state: WorkerReport['state'], exitCode: number | null = null, message: string | null = null): WorkerReport => ({
    workerId: w.workerId,
    attempt: w.attempt,
    state,
    exitCode,
    message,
  });
  /** Ends every run still live, so that each test starts on an empty fleet. */
  async function cancelAll() {
    const plane = planeOf();
    const live = await plane.systemCtx.db.select({ id: runs.id }).from(runs).where(sql`${runs.finishedAt} is null`);
    for (const { id } of live) await plane.admin(`/api/v1/runs/${id}/cancel`, { method: 'POST' });
  }
  return { beat, reconcile, submit, show, desiredWorkers, report, cancelAll };
}

async function registerTrainer(plane: TestPlane) {
  await putRuntimeTemplate({
    ctx: plane.systemCtx,
    input: {
      workspaceId: plane.workspaceId,
      name: 'trainer',
      spec: {
        description: 'a trainer',
        healthPath: '/health',
        metricsPath: null,
        executable: '/opt/train/bin/train',
        executableSha256: '1'.repeat(64),
        args: ['--steps', '{steps}'],
        params: { steps: { type: 'integer', min: 1, max: 1_000_000 } },
        env: [],
      },
    },
  });
}

describe('runs on the fleet', () => {
  let plane: TestPlane;
  let a: TestMachine;
  let b: TestMachine;
  const { beat, reconcile, submit, show, desiredWorkers, report, cancelAll } = harness(() => plane);

  beforeAll(async () => {
    plane = await startTestPlane({ config: { ...STEADY_LIVENESS, reconcileIntervalMs: 600_000 } });
    await registerTrainer(plane);
    a = await enrollTestMachine(plane, 'gpu-a');
    b = await enrollTestMachine(plane, 'gpu-b');
    await beat(a, [], '10.0.0.1');
    await beat(b, [], '10.0.0.2');
  }, 60_000);
  // A test that fails midway leaves its runs live: the next one must still start on an empty fleet.
  afterEach(cancelAll);
  afterAll(async () => {
    await plane?.stop();
  });

  it('refuses bad input with a 4xx in the error envelope and stores nothing', async () => {
    expect((await submit('Bad Name', { template: 'trainer', workers: 1 })).status).toBe(400);
    const unknown = await submit('x', { template: 'nope', workers: 1 });
    expect(unknown.status).toBe(400);
    expect(unknown.body.error?.code).toBe('unknown_template');
    const tooMany = await submit('x', { template: 'trainer', params: { steps: 5 }, workers: 1, priority: 5000 });
    expect(tooMany.body.error?.message).toMatch(/priority must be at most 1000/);
    expect(await plane.systemCtx.db.select().from(runs)).toHaveLength(0);
  });

  it('queues a run no machine fits with its reason, places it once a machine has room, and carries its workers with their environment', async () => {
    const queued = await submit('train', { template: 'trainer', params: { steps: 10 }, workers: 2 });
    expect(queued.status).toBe(201);
    expect(queued.body).toMatchObject({ state: 'pending', position: 1 });
    expect(queued.body.reason).toMatch(/do not fit now/);
    expect((await submit('train', { template: 'trainer', params: { steps: 10 }, workers: 1 })).status).toBe(409);

    await plane.systemCtx.db
      .update(machines)
      .set({ inventory: { ...TEST_INVENTORY, gpus: [testGpu(0), testGpu(1)] } })
      .where(eq(machines.id, a.machineId));
    await reconcile();
    const placed = await show(queued.body.id);
    expect(placed.state).toBe('preparing');
    expect(placed.workers.map((w) => w.machineId)).toEqual([a.machineId, a.machineId]);
    const workers = await desiredWorkers(a);
    expect(workers.map((w) => [w.name, w.phase, w.command.env])).toEqual([
      ['train-0', 'start', { RANK: '0', LOCAL_RANK: '0', WORLD_SIZE: '2', MASTER_ADDR: '10.0.0.1', MASTER_PORT: '29500' }],
      ['train-1', 'start', { RANK: '1', LOCAL_RANK: '1', WORLD_SIZE: '2', MASTER_ADDR: '10.0.0.1', MASTER_PORT: '29500' }],
    ]);
    expect(workers[0]!.command.args).toEqual(['--steps', '10']);

    // The machine is full: a second run waits behind it, and the machine view counts the reservation.
    const second = await submit('second', { template: 'trainer', params: { steps: 1 }, workers: 1 });
    expect(second.body).toMatchObject({ state: 'pending', position: 1 });
    const view = (await (await plane.admin(`/api/v1/machines/${a.machineId}`)).json()) as MachineView;
    expect(view.resources).toMatchObject({
      capacity: { gpus: 2 },
      replicas: { gpus: 0, memoryMiB: 0, cores: 0 },
      workers: { gpus: 2, memoryMiB: 0, cores: 0 },
      free: { gpus: 0 },
    });

    // Another machine's report of these workers is ignored; this machine's drive them to completion.
    await beat(b, [report(workers[0]!, 'running')]);
    expect((await show(queued.body.id)).workers[0]!.state).toBe('pending');
    await beat(a, [report(workers[0]!, 'running'), report(workers[1]!, 'running')]);
    await reconcile();
    expect((await show(queued.body.id)).state).toBe('running');
    await beat(a, [report(workers[0]!, 'completed', 0), report(workers[1]!, 'completed', 0)]);
    await reconcile();
    const done = await show(queued.body.id);
    expect(done.state).toBe('completed');
    expect(done.finishedAt).not.toBeNull();
    expect(done.events.map((e) => `${e.workerId === null ? 'run' : 'w'} ${e.from}>${e.to}`)).toContain('run running>completed');
    // Its reservation is released: the second run is placed there.
    expect((await show(second.body.id)).state).toBe('preparing');
    await cancelAll();
    expect(await desiredWorkers(a)).toEqual([]);

    // Each released worker's hold is kept for the fair share, from its placement to its release: the second run's
    // (cancelled) too. The queue's standing counts them; past the window they are pruned.
    const db = plane.systemCtx.db;
    const holds = await db
      .select()
      .from(runHolds)
      .where(inArray(runHolds.runId, [queued.body.id, second.body.id]));
    expect(holds.map((h) => [h.runId, h.gpus]).sort()).toEqual([
      [queued.body.id, 1],
      [queued.body.id, 1],
      [second.body.id, 1],
    ]);
    for (const h of holds) expect(h.heldTo.getTime()).toBeGreaterThanOrEqual(h.heldFrom.getTime());
    const heldMs = holds.reduce((sum, h) => sum + h.heldTo.getTime() - h.heldFrom.getTime(), 0);
    const standing = RunQueueStanding.parse(await (await plane.admin('/api/v1/run-queue')).json());
    expect(standing).toMatchObject({ waiting: 0, gpusHeld: 0, rank: null, weight: 1 });
    expect(standing.gpuSeconds).toBe(Math.round(heldMs / 1000));
    // The default window: a day.
    const DAY = 86_400_000;
    const ends = holds.map((h) => h.heldTo.getTime());
    await pruneRunHolds(db, new Date(Math.min(...ends) + DAY - 1), DAY);
    expect(
      await db
        .select()
        .from(runHolds)
        .where(inArray(runHolds.runId, [queued.body.id, second.body.id])),
    ).toHaveLength(3);
    await pruneRunHolds(db, new Date(Math.max(...ends) + DAY + 1), DAY);
    expect(
      await db
        .select()
        .from(runHolds)
        .where(inArray(runHolds.runId, [queued.body.id, second.body.id])),
    ).toEqual([]);
  });

  it('fails the run on a failed worker with the fail policy, and restarts one with restart-worker after its back-off', async () => {
    const failing = await submit('fails', { template: 'trainer', params: { steps: 1 }, workers: 1 });
    const [w] = await desiredWorkers(a);
    await beat(a, [report(w!, 'running')]);
    await beat(a, [report(w!, 'failed', 3)]);
    await reconcile();
    const failed = await show(failing.body.id);
    expect(failed).toMatchObject({ state: 'failed' });
    expect(failed.reason).toMatch(/exited with code 3; failure policy: fail/);

    const restarting = await submit('restarts', {
      template: 'trainer',
      params: { steps: 1 },
      workers: 1,
      failurePolicy: { action: 'restart-worker', maxRestarts: 1, backoff: { initialMs: 100, maxMs: 100 } },
    });
    const [first] = await desiredWorkers(a);
    await beat(a, [report(first!, 'running')]);
    await beat(a, [report(first!, 'failed', 1)]);
    await reconcile();
    await new Promise((resolve) => setTimeout(resolve, 150));
    await reconcile();
    const [again] = await desiredWorkers(a);
    expect(again).toMatchObject({ workerId: first!.workerId, attempt: 1, phase: 'start' });
    // The old attempt's report no longer moves it; the new one's does. Past maxRestarts, the run fails.
    await beat(a, [report(first!, 'running')]);
    expect((await show(restarting.body.id)).workers[0]!.state).toBe('pending');
    await beat(a, [report(again!, 'failed', 1)]);
    await reconcile();
    expect((await show(restarting.body.id)).reason).toMatch(/restart limit 1 reached/);
  });

  it('restarts the whole run with restart-run, back through the queue', async () => {
    const run = await submit('again', {
      template: 'trainer',
      params: { steps: 1 },
      workers: 2,
      // Long enough that a reconcile the heartbeat itself asks for cannot place it again before the checks below,
      // however loaded the machine.
      failurePolicy: { action: 'restart-run', maxRestarts: 2, backoff: { initialMs: 1_500, maxMs: 1_500 } },
    });
    const workers = await desiredWorkers(a);
    await beat(a, [report(workers[0]!, 'running'), report(workers[1]!, 'failed', 2)]);
    await reconcile();
    const requeued = await show(run.body.id);
    expect(requeued).toMatchObject({ state: 'pending', restarts: 1 });
    expect(await desiredWorkers(a)).toEqual([]);
    await new Promise((resolve) => setTimeout(resolve, 1_600));
    await reconcile();
    expect((await desiredWorkers(a)).map((w) => w.attempt)).toEqual([1, 1]);
    await cancelAll();
  });

  it('prepares a gang and starts every worker together once all are ready to start', async () => {
    const run = await submit('gang', { template: 'trainer', params: { steps: 1 }, workers: 2, gang: { timeoutMs: 600_000 } });
    const workers = await desiredWorkers(a);
    expect(workers.map((w) => w.phase)).toEqual(['prepare', 'prepare']);
    await beat(a, [report(workers[0]!, 'ready-to-start'), report(workers[1]!, 'pulling')]);
    await reconcile();
    expect((await desiredWorkers(a)).map((w) => w.phase)).toEqual(['prepare', 'prepare']);
    await beat(a, [report(workers[0]!, 'ready-to-start'), report(workers[1]!, 'ready-to-start')]);
    await reconcile();
    expect((await desiredWorkers(a)).map((w) => w.phase)).toEqual(['start', 'start']);
    const started = await show(run.body.id);
    expect(started.workers.map((w) => w.state)).toEqual(['starting', 'starting']);
    expect(started.events.some((e) => e.reason === 'gang assembled: all 2 workers ready to start')).toBe(true);
  });

  it('cancels a live run: it and its workers fail, their machines drop them; an ended run is 409', async () => {
    const live = (await submit('to-cancel', { template: 'trainer', params: { steps: 1 }, workers: 2, gang: { timeoutMs: 600_000 } })).body;
    expect(await desiredWorkers(a)).toHaveLength(2);
    const cancelled = await plane.admin(`/api/v1/runs/${live.id}/cancel`, { method: 'POST' });
    expect(cancelled.status).toBe(200);
    expect(await cancelled.json()).toMatchObject({ state: 'failed', reason: 'cancelled' });
    expect(await desiredWorkers(a)).toEqual([]);
    expect((await plane.admin(`/api/v1/runs/${live.id}/cancel`, { method: 'POST' })).status).toBe(409);
    const held = await plane.systemCtx.db.select().from(runWorkers).where(sql`${runWorkers.releasedAt} is null and ${runWorkers.machineId} is not null`);
    expect(held).toEqual([]);
    const list = await (await plane.admin('/api/v1/runs?limit=2')).json();
    expect(list.data).toHaveLength(2);
    expect(list.nextCursor).not.toBeNull();
  });
});

/**
 * Workers on machines whose heartbeats stop, with liveness short enough to watch (stale after 0.4 s, down after
 * 1.2 s): stale, then re-adopted or found gone when the machine comes back; down, then their failure policy, unless
 * so many machines are silent that replacement is paused.
 */
describe('runs when sight of a machine is lost', () => {
  let plane: TestPlane;
  const fleet: TestMachine[] = [];
  const { beat, reconcile, submit, show, desiredWorkers, report, cancelAll } = harness(() => plane);
  const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
  /** A pass after the machines still alive reported, the others silent. */
  async function passWith(alive: readonly TestMachine[], reports = new Map<TestMachine, WorkerReport[]>()) {
    for (const machine of alive) await beat(machine, reports.get(machine) ?? []);
    await reconcile();
  }
  const heldOn = async (machineId: string) =>
    plane.systemCtx.db.select().from(runWorkers).where(sql`${runWorkers.machineId} = ${machineId} and ${runWorkers.releasedAt} is null`);

  beforeAll(async () => {
    plane = await startTestPlane({
      config: { heartbeatIntervalMs: 200, runtimeGraceMs: 200, machineLifetimeMs: 1_200, runtimeTtlMs: 1_200, reconcileIntervalMs: 600_000 },
    });
    await registerTrainer(plane);
    for (const name of ['lost-a', 'lost-b', 'lost-c', 'lost-d']) {
      const machine = await enrollTestMachine(plane, name);
      await plane.systemCtx.db
        .update(machines)
        .set({ inventory: { ...TEST_INVENTORY, gpus: [testGpu(0)] } })
        .where(eq(machines.id, machine.machineId));
      await beat(machine, [], `10.1.0.${fleet.length + 1}`);
      fleet.push(machine);
    }
  }, 60_000);
  afterAll(async () => {
    await plane?.stop();
  });

  /** The run's workers by machine, as placed. */
  async function placed(runId: string) {
    const detail = await show(runId);
    return detail.workers.map((w) => fleet.find((m) => m.machineId === w.machineId)!);
  }

  it('keeps a stale worker reserved and re-adopts it; moves a down one elsewhere by restart-worker as a new attempt', async () => {
    const run = await submit('moves', {
      template: 'trainer',
      params: { steps: 1 },
      workers: 2,
      failurePolicy: { action: 'restart-worker', maxRestarts: 2, backoff: { initialMs: 100, maxMs: 100 } },
    });
    const [home0, home1] = await placed(run.body.id);
    const [w1] = (await desiredWorkers(home1!)).filter((w) => w.name === 'moves-1');
    const spare = fleet.filter((m) => m !== home0 && m !== home1);
    await passWith([home0!, home1!], new Map([[home1!, [report(w1!, 'running')]]]));

    // Silent past its grace: stale, its reservation kept.
    await pause(500);
    await passWith([home0!, ...spare]);
    const stale = await show(run.body.id);
    expect(stale.workers[1]!.state).toBe('stale');
    expect(stale.state).toBe('stale');
    expect(await heldOn(home1!.machineId)).toHaveLength(1);

    // Back, reporting the process: re-adopted as it runs.
    await passWith([home0!, home1!, ...spare], new Map([[home1!, [report(w1!, 'running')]]]));
    const back = await show(run.body.id);
    expect(back.workers[1]!.state).toBe('running');
    expect(back.events.some((e) => e.from === 'stale' && e.to === 'running' && e.origin === 'agent')).toBe(true);

    // Silent past its lifetime: down, then restarted elsewhere as a new attempt, its old reservation gone.
    await pause(1_300);
    await passWith([home0!, ...spare]);
    const down = await show(run.body.id);
    expect(down.events.filter((e) => e.workerId === down.workers[1]!.id).map((e) => `${e.from}>${e.to}`)).toEqual(
      expect.arrayContaining(['running>stale', 'stale>down', 'down>failed']),
    );
    expect(down.reason).toMatch(/its machine is down; restarting it elsewhere \(restart 1 of 2\)/);
    expect(await heldOn(home1!.machineId)).toEqual([]);
    await pause(150);
    await passWith([home0!, ...spare]);
    const moved = await show(run.body.id);
    const target = fleet.find((m) => m.machineId === moved.workers[1]!.machineId)!;
    expect(spare).toContain(target);
    const [again] = await desiredWorkers(target);
    expect(again).toMatchObject({ workerId: w1!.workerId, attempt: 1, phase: 'start' });
    expect(again!.command.env).toMatchObject({ RANK: '1', LOCAL_RANK: '0', MASTER_ADDR: w1!.command.env.MASTER_ADDR });
    // The machine that comes back no longer has it, and its report of the old attempt moves nothing.
    await passWith([home0!, home1!, ...spare], new Map([[home1!, [report(w1!, 'running')]]]));
    expect(await desiredWorkers(home1!)).toEqual([]);
    expect((await show(run.body.id)).workers[1]!.state).toBe('pending');
    await cancelAll();
  });

  it('fails the run by its policy when a stale machine comes back without the process, and releases its workers', async () => {
    const run = await submit('gone', { template: 'trainer', params: { steps: 1 }, workers: 1 });
    const [home] = await placed(run.body.id);
    const [w] = await desiredWorkers(home!);
    const others = fleet.filter((m) => m !== home);
    await passWith(fleet, new Map([[home!, [report(w!, 'running')]]]));
    await pause(500);
    await passWith(others);
    expect((await show(run.body.id)).workers[0]!.state).toBe('stale');
    await passWith(fleet, new Map([[home!, [report(w!, 'failed', null, 'process not found')]]]));
    const failed = await show(run.body.id);
    expect(failed.state).toBe('failed');
    expect(failed.reason).toMatch(/process not found; failure policy: fail/);
    expect(await heldOn(home!.machineId)).toEqual([]);
  });

  it('keeps down workers and their reservations while replacement is paused, then applies the policy once it is not', async () => {
    const run = await submit('paused', { template: 'trainer', params: { steps: 1 }, workers: 2 });
    const homes = await placed(run.body.id);
    const [idle, alive] = fleet.filter((m) => !homes.includes(m));
    await pause(1_300);
    // Three of four machines silent: likely a partition, so nothing is replaced.
    await passWith([alive!]);
    const waiting = await show(run.body.id);
    expect(waiting.state).toBe('down');
    expect(waiting.workers.map((x) => x.state)).toEqual(['down', 'down']);
    for (const home of homes) expect(await heldOn(home.machineId)).toHaveLength(1);
    // Two come back: the other is down with one more, no partition, and the fail policy fails the run.
    await passWith([alive!, idle!, homes[0]!]);
    const failed = await show(run.body.id);
    expect(failed.state).toBe('failed');
    expect(failed.reason).toMatch(/its machine is down; failure policy: fail/);
    expect(await heldOn(homes[1]!.machineId)).toEqual([]);
  });
});

describe('an aged run holds its machines against replicas too', () => {
  let plane: TestPlane;
  let a: TestMachine;
  let b: TestMachine;
  const { beat, reconcile, submit, show, desiredWorkers, report } = harness(() => plane);

  beforeAll(async () => {
    plane = await startTestPlane({ config: { ...STEADY_LIVENESS, reconcileIntervalMs: 600_000 } });
    await registerTrainer(plane);
    a = await enrollTestMachine(plane, 'gpu-a');
    b = await enrollTestMachine(plane, 'gpu-b');
    await plane.systemCtx.db.update(machines).set({ inventory: { ...TEST_INVENTORY, gpus: [testGpu(0)] } });
    await beat(a);
    await beat(b);
  }, 60_000);
  afterAll(async () => {
    await plane?.stop();
  });

  it('keeps a new deployment off the held machines, saying why, and starts the aged run once they drain', async () => {
    // The fleet is kept busy: one small run on each machine.
    const small = [await submit('small-a', { template: 'trainer', params: { steps: 1 }, workers: 1 })];
    small.push(await submit('small-b', { template: 'trainer', params: { steps: 1 }, workers: 1 }));
    const big = await submit('big', { template: 'trainer', params: { steps: 1 }, workers: 2 });
    expect(big.body.state).toBe('pending');
    // It has waited past the aging age (2 hours by default).
    await plane.systemCtx.db.update(runs).set({ waitingSince: sql`now() - interval '3 hours'` }).where(eq(runs.id, big.body.id));
    await reconcile();
    expect((await show(big.body.id)).reason).toMatch(/aged \(waiting 180 min\): holding machines .*, which smaller runs no longer backfill/);

    // A replica reserving memory only would fit beside the small runs: the holds keep it off both machines.
    const put = await plane.admin('/api/v1/deployments/chat', {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'chat', runtime: { kind: 'simulated', model: 'chat' }, replicas: 1, memoryMiB: 1024 }),
    });
    expect(put.status).toBe(200);
    const detail = (await (await plane.admin('/api/v1/deployments/chat')).json()) as DeploymentDetail;
    expect(detail.status.unplaceable).toBe(1);
    expect(detail.status.unplaceableReasons.map((r) => r.reason)).toEqual([`held for aged run ${big.body.id}`, `held for aged run ${big.body.id}`]);
    expect(await plane.systemCtx.db.select().from(assignments)).toHaveLength(0);

    // The small runs end; their machines empty toward the aged run, which starts on both.
    for (const machine of [a, b]) {
      const [w] = await desiredWorkers(machine);
      await beat(machine, [report(w!, 'running')]);
      await beat(machine, [report(w!, 'completed', 0)]);
    }
    await reconcile();
    for (const run of small) expect((await show(run.body.id)).state).toBe('completed');
    const started = await show(big.body.id);
    expect(started.state).toBe('preparing');
    expect(new Set(started.workers.map((w) => w.machineId))).toEqual(new Set([a.machineId, b.machineId]));
  });
});
