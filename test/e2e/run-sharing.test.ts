import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { and, asc, inArray, isNull } from 'drizzle-orm';
import { ensureJobTemplates, startSimNode, type SimNode } from '../../functions/hosts/dev/fleet.js';
import { runHolds, runs } from '../../functions/store/schema/index.js';
import { managementClient } from '../../shared/api/client.js';
import { WorkspaceCreated, WorkspaceView } from '../../shared/contracts/tokens.js';
import { MachineView } from '../../shared/contracts/machine.js';
import { RunQueueStanding, type RunDetail } from '../../shared/contracts/run-view.js';
import { STEADY_LIVENESS, startTestPlane, type TestPlane } from '../helpers/plane.js';
import { readyMachines, runsApi, simJob, stopRunFleet } from '../helpers/runs.js';
import { simJobs } from '../helpers/sim-jobs.js';

const NODES = ['pool-a', 'pool-b', 'pool-c', 'pool-d'];
/** Each small run: one worker of one GPU (a whole simulated GB10) for this long. */
const RUN_MS = 2_000;
const EACH = 12;

/**
 * Two workspaces on one fleet (docs/runs.md, "Sharing machines" and "Fair share"): the default workspace enrolled
 * four simulated nodes and lends them to the run queue; team-b has none. Real agents run the workers.
 */
describe('two workspaces sharing the fleet through the run queue', () => {
  let plane: TestPlane;
  let nodes: SimNode[] = [];
  let dir: string;
  let before: number[];
  let teamB: { id: string; api: ReturnType<typeof managementClient> };
  const fleet = runsApi(() => plane);
  const b = runsApi(() => ({ api: teamB.api }));

  beforeAll(async () => {
    before = await simJobs();
    plane = await startTestPlane({ config: STEADY_LIVENESS });
    await ensureJobTemplates(plane);
    dir = await mkdtemp(join(tmpdir(), 'lnx-sharing-'));
    nodes = await Promise.all(NODES.map((name) => startSimNode(plane, name, join(dir, 'nodes'))));
    await readyMachines(plane, NODES);
    const { data } = await plane.api.POST('/workspaces', { body: { name: 'team-b' } });
    const created = WorkspaceCreated.parse(data);
    teamB = { id: created.workspace.id, api: managementClient(plane.url, created.adminToken.token) };
    // Its own copy of the template: templates are a workspace's; the node's policy allows the same executable.
    await ensureJobTemplates({ systemCtx: plane.systemCtx, workspaceId: teamB.id });
    // A quota team-b's runs of up to 4 GPUs fit: the fleet's four.
    expect((await teamB.api.PUT('/workspaces/current/policy', { body: { quota: { gpus: 4 } } })).response.status).toBe(200);
  }, 180_000);

  afterAll(() => stopRunFleet({ nodes, before, dir, plane }));

  it("keeps a workspace's runs off machines it does not own until they are shared; sharing is an admin's, audited", async () => {
    const waiting = await b.submit({ name: 'early', spec: { ...simJob(100), workers: 1, resources: { gpus: 1 } } });
    const refused = await b.until(waiting.id, (r) => r.reason !== null, 'the run to say why it waits');
    expect(refused).toMatchObject({ state: 'pending', position: 1 });
    expect(refused.reason).toMatch(/^1 worker of 1 GPU each does not fit now/);
    // team-b cannot share machines that are not its own; an operator of the default workspace may not either.
    const [first] = (await plane.api.GET('/machines')).data!.data;
    expect((await teamB.api.POST('/machines/{id}/share', { params: { path: { id: first!.id } } })).response.status).toBe(404);
    for (const machine of (await plane.api.GET('/machines')).data!.data) {
      const { data } = await plane.api.POST('/machines/{id}/share', { params: { path: { id: machine.id } } });
      expect(MachineView.parse(data).shared).toBe(true);
    }
    const placed = await b.until(waiting.id, (r) => r.state === 'completed', "team-b's run to complete on a shared machine");
    expect(NODES).toContain(placed.workers[0]!.machineName);
    const { data: audit } = await plane.api.GET('/audit', { params: { query: { action: 'machine.share' } } });
    expect(audit?.data).toHaveLength(4);
  });

  it('shares the fleet within 10 % of equal fair shares, lets a higher priority jump the queue, and waits a run over quota without blocking', async () => {
    // The queue fills while every machine is cordoned, so that what is admitted first is the queue's choice alone
    // (on a loaded machine the submissions took so long that every run was admitted before the urgent one came).
    const machines = (await plane.api.GET('/machines')).data!.data;
    const schedule = async (verb: 'cordon' | 'uncordon') => {
      for (const m of machines) expect((await plane.api.POST(`/machines/{id}/${verb}`, { params: { path: { id: m.id } } })).response.status).toBe(200);
    };
    await schedule('cordon');
    // The default workspace submits all of its runs first: by submission time alone it would take the fleet.
    const ours: RunDetail[] = [];
    for (let i = 0; i < EACH; i++) ours.push(await fleet.submit({ name: `a-${i}`, spec: { ...simJob(RUN_MS), workers: 1, resources: { gpus: 1 } } }));
    // Over team-b's quota of 4 GPUs whatever the fleet does: it waits, and b's smaller runs pass it.
    const tooBig = await b.submit({ name: 'too-big', spec: { ...simJob(100), workers: 5, resources: { gpus: 1 } } });
    const theirs: RunDetail[] = [];
    for (let i = 0; i < EACH; i++) theirs.push(await b.submit({ name: `b-${i}`, spec: { ...simJob(RUN_MS), workers: 1, resources: { gpus: 1 } } }));
    // Then, while they wait, a run of higher priority: it is admitted before every run then waiting.
    const urgent = await fleet.submit({ name: 'urgent', spec: { ...simJob(RUN_MS), workers: 1, resources: { gpus: 1 }, priority: 10 } });
    // The runs waiting when it came: read from the store, not assumed.
    const waitingThen = (
      await plane.systemCtx.db
        .select({ id: runs.id })
        .from(runs)
        .where(
          and(
            inArray(
              runs.id,
              [...ours, ...theirs].map((r) => r.id),
            ),
            isNull(runs.admittedAt),
          ),
        )
    ).map((r) => r.id);
    expect(waitingThen.length, 'runs waiting when the urgent one came').toBe(2 * EACH);
    await schedule('uncordon');
    const all = [...ours, ...theirs, urgent];
    const ended = (r: { state: string }) => r.state === 'completed' || r.state === 'failed';
    for (const run of [...ours, urgent]) expect((await fleet.until(run.id, ended, `${run.name} to end`, 120_000)).state).toBe('completed');
    for (const run of theirs) expect((await b.until(run.id, ended, `${run.name} to end`, 120_000)).state).toBe('completed');

    const db = plane.systemCtx.db;
    const admitted = await db
      .select({ id: runs.id, workspaceId: runs.workspaceId, admittedAt: runs.admittedAt, submittedAt: runs.submittedAt })
      .from(runs)
      .where(
        inArray(
          runs.id,
          all.map((r) => r.id),
        ),
      )
      .orderBy(asc(runs.admittedAt));
    const urgentRow = admitted.find((r) => r.id === urgent.id)!;
    const passedBy = admitted.filter((r) => waitingThen.includes(r.id));
    expect(passedBy.length).toBeGreaterThan(0);
    for (const row of passedBy) expect(row.admittedAt!.getTime()).toBeGreaterThanOrEqual(urgentRow.admittedAt!.getTime());

    // GPU-seconds each workspace held while both had runs waiting: from the first placement until the first
    // workspace's last small run was placed (the holds the queue's fair share counts, run_holds).
    const holds = await db
      .select()
      .from(runHolds)
      .where(
        inArray(
          runHolds.runId,
          [...ours, ...theirs].map((r) => r.id),
        ),
      );
    const lastPlaced = (ws: string) => Math.max(...holds.filter((h) => h.workspaceId === ws).map((h) => h.heldFrom.getTime()));
    const from = Math.min(...holds.map((h) => h.heldFrom.getTime()));
    const to = Math.min(lastPlaced(plane.workspaceId), lastPlaced(teamB.id));
    const held = (ws: string) =>
      holds
        .filter((h) => h.workspaceId === ws)
        .reduce((sum, h) => sum + Math.max(0, Math.min(h.heldTo.getTime(), to) - Math.max(h.heldFrom.getTime(), from)) * h.gpus, 0) / 1000;
    const a = held(plane.workspaceId);
    const bHeld = held(teamB.id);
    const share = a / (a + bHeld);
    console.log(
      `fair share over ${((to - from) / 1000).toFixed(1)} s of contention: default ${a.toFixed(1)} GPU-s, team-b ${bHeld.toFixed(1)} GPU-s (default's share ${(100 * share).toFixed(1)} %, fair 50 %)`,
    );
    expect(Math.abs(share - 0.5)).toBeLessThanOrEqual(0.05);

    // The run over quota still waits, with the reason, after every smaller run of its workspace completed.
    const stuck = await b.show(tooBig.id);
    expect(stuck.state).toBe('pending');
    expect(stuck.reason).toMatch(/quota/);
    const standing = RunQueueStanding.parse((await teamB.api.GET('/run-queue')).data);
    expect(standing).toMatchObject({ waiting: 1, rank: 1, weight: 1 });
    expect(standing.gpuSeconds).toBeGreaterThanOrEqual(Math.floor((EACH * RUN_MS) / 1000));
    await b.cancel(tooBig.id);
  }, 240_000);

  it("sets a workspace's weight and ceiling from the default workspace only", async () => {
    const body = { weight: 2, priorityCeiling: 5 };
    const denied = await teamB.api.PUT('/workspaces/{id}/run-share', { params: { path: { id: teamB.id } }, body });
    expect(denied.response.status).toBe(403);
    const { data } = await plane.api.PUT('/workspaces/{id}/run-share', { params: { path: { id: teamB.id } }, body });
    expect(WorkspaceView.parse(data).runs).toEqual(body);
    const bad = await plane.api.PUT('/workspaces/{id}/run-share', { params: { path: { id: teamB.id } }, body: { weight: 0, priorityCeiling: 5 } });
    expect(bad.response.status).toBe(400);
    const standing = RunQueueStanding.parse((await teamB.api.GET('/run-queue')).data);
    expect(standing).toMatchObject({ weight: 2, priorityCeiling: 5 });
  });
});
