import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startSimNode, stopSimNodes, type SimNode } from '../../functions/hosts/dev/fleet.js';
import type { DeploymentDetail } from '../../shared/contracts/deployment.js';
import type { MachineView } from '../../shared/contracts/machine.js';
import { describePg } from '../helpers/pg.js';
import { STEADY_LIVENESS, startTestPlane, waitFor, type StoreKind, type TestPlane } from '../helpers/plane.js';
import { startLoad } from '../helpers/load.js';

const NODES = ['dgx-1', 'dgx-2', 'dgx-3', 'dgx-4'];

/** The spec as an operator PUTs it; `ttftMs` is what the rollout test changes. */
const spec = (replicas: number, ttftMs = 5) => ({
  model: 'roll-chat',
  runtime: { kind: 'simulated', model: 'roll-chat', ttftMs, tokensPerSecond: 0, loadMs: 300, memoryMiB: 64, failureRate: 0 },
  replicas,
  selector: { sim: 'true' },
  memoryMiB: 64,
  maxConcurrency: 8,
});

/**
 * Rollouts, scaling, cordon and drain under a steady request load, on real agents and real simulated runtimes:
 * nothing that did not change restarts, and no request fails.
 */
function rolloutSuite(store: StoreKind) {
  let plane: TestPlane;
  let nodes: SimNode[] = [];

  const put = async (body: unknown) => {
    const response = await plane.admin('/api/v1/deployments/roll-chat', { method: 'PUT', body: JSON.stringify(body) });
    expect(response.status, await response.clone().text()).toBe(200);
    return (await response.json()) as { generation: number };
  };
  const detail = async (): Promise<DeploymentDetail> => {
    const response = await plane.admin('/api/v1/deployments/roll-chat');
    expect(response.status).toBe(200);
    return (await response.json()) as DeploymentDetail;
  };
  const settled = async (replicas: number) =>
    await waitFor(
      async () => {
        const d = await detail();
        return d.status.rollout.state === 'complete' && d.status.ready === replicas && d.status.replicas.length === replicas ? d : null;
      },
      { timeoutMs: 60_000, what: `${replicas} ready replicas and a complete rollout` },
    );
  /** assignment id -> pid of every runtime the nodes run, read from the agents' own records. */
  const pids = async () => {
    const out = new Map<string, number>();
    for (const node of nodes) {
      const dir = join(node.stateDir, 'runtimes');
      for (const file of (await readdir(dir)).filter((f) => f.endsWith('.json'))) {
        const record = JSON.parse(await readFile(join(dir, file), 'utf8')) as { assignmentId: string; pid: number };
        out.set(record.assignmentId, record.pid);
      }
    }
    return out;
  };
  const machines = async () => ((await (await plane.admin('/api/v1/machines')).json()) as { data: MachineView[] }).data;
  const load = () => startLoad({ url: plane.url, token: plane.adminToken, model: 'roll-chat', workers: 3, pauseMs: 30 });
  const timed = async <T>(what: string, work: () => Promise<T>) => {
    const started = performance.now();
    const result = await work();
    console.log(`[${store}] ${what}: ${((performance.now() - started) / 1000).toFixed(1)} s`);
    return result;
  };

  beforeAll(async () => {
    plane = await startTestPlane({ store, config: STEADY_LIVENESS });
    nodes = await Promise.all(NODES.map((name) => startSimNode(plane, name, join(plane.dataDir, 'nodes'))));
    await put(spec(4));
    await settled(4);
  }, 120_000);

  afterAll(async () => {
    await stopSimNodes(nodes);
    await plane?.stop();
  });

  it('re-applying an unchanged spec (keys in another order) changes nothing: same generation, same pids', async () => {
    const before = await pids();
    const generation = (await detail()).generation;
    const { runtime, ...rest } = spec(4);
    const reordered = { runtime: Object.fromEntries(Object.entries(runtime).reverse()), ...Object.fromEntries(Object.entries(rest).reverse()) };
    const traffic = load();
    expect((await put(reordered)).generation).toBe(generation);
    await new Promise((r) => setTimeout(r, 1_000));
    const report = await traffic.stop();
    expect(report.failures).toEqual([]);
    expect(report.ok).toBeGreaterThan(3);
    expect(await pids()).toEqual(before);
  });

  it('scaling 4 -> 2 -> 4 under load: no failed request, and the survivors keep their pid', async () => {
    const before = await pids();
    const traffic = load();
    await put(spec(2));
    await timed('scale 4 -> 2', () => settled(2));
    const survivors = await pids();
    expect(survivors.size).toBe(2);
    for (const [assignmentId, pid] of survivors) expect(before.get(assignmentId)).toBe(pid);
    await put(spec(4));
    await timed('scale 2 -> 4', () => settled(4));
    const after = await pids();
    for (const [assignmentId, pid] of survivors) expect(after.get(assignmentId)).toBe(pid);
    const report = await traffic.stop();
    expect(report.failures).toEqual([]);
    expect(report.ok).toBeGreaterThan(5);
    const events = (await detail()).events.map((e) => e.type);
    expect(events).toContain('retired');
    expect(events).toContain('drained');
  });

  it('a changed spec rolls under load: new replicas are ready before old ones drain, and no request fails', async () => {
    const before = await pids();
    const traffic = load();
    const { generation } = await put(spec(4, 6));
    const d = await timed('rollout of 4 replicas', () => settled(4));
    const report = await traffic.stop();
    console.log(`[${store}] rollout under load: ${report.ok} ok, ${report.failures.length} failed of ${report.sent}`);
    expect(report.failures).toEqual([]);
    expect(d.generation).toBe(generation);
    expect(d.status.rollout).toEqual({ state: 'complete', updated: 4, outdated: 0, retiring: 0 });
    // Every replica is new: a rollout replaces, it never restarts in place.
    const after = await pids();
    for (const assignmentId of after.keys()) expect(before.has(assignmentId)).toBe(false);
  });

  it('cordon keeps serving and stops placements; drain empties the machine with no failed request', async () => {
    // Three replicas on four machines: the drained machine's replica has somewhere to go.
    await put(spec(3, 6));
    const [target] = (await settled(3)).status.replicas;
    const machineId = target!.machineId;
    expect((await plane.admin(`/api/v1/machines/${machineId}/cordon`, { method: 'POST' })).status).toBe(200);
    const cordoned = (await machines()).find((m) => m.id === machineId)!;
    expect(cordoned.cordoned).toBe(true);
    expect(cordoned.runtimes.filter((r) => r.desired).every((r) => r.routable)).toBe(true);

    const traffic = load();
    const drain = await plane.admin(`/api/v1/machines/${machineId}/drain`, { method: 'POST' });
    expect(drain.status).toBe(200);
    expect(((await drain.json()) as MachineView).draining).toBe(true);
    await timed('drain of one machine', () =>
      waitFor(async () => (await machines()).find((m) => m.id === machineId)?.drained, { timeoutMs: 60_000, what: 'the machine drained' }),
    );
    const d = await settled(3);
    const report = await traffic.stop();
    console.log(`[${store}] drain under load: ${report.ok} ok, ${report.failures.length} failed of ${report.sent}`);
    expect(report.failures).toEqual([]);
    expect(d.status.replicas.some((r) => r.machineId === machineId)).toBe(false);
    expect((await plane.admin(`/api/v1/machines/${machineId}/uncordon`, { method: 'POST' })).status).toBe(200);
  });

  it('DELETE retires the deployment: its model leaves /v1/models and its runtimes stop', async () => {
    expect((await plane.admin('/api/v1/deployments/roll-chat', { method: 'DELETE' })).status).toBe(200);
    const models = (await (await plane.admin('/v1/models')).json()) as { data: Array<{ id: string }> };
    expect(models.data.map((m) => m.id)).not.toContain('roll-chat');
    expect((await plane.admin('/api/v1/deployments/roll-chat')).status).toBe(404);
    await waitFor(async () => (await machines()).every((m) => m.runtimes.length === 0), { timeoutMs: 30_000, what: 'every runtime stopped' });
    expect((await plane.admin('/api/v1/deployments/roll-chat', { method: 'DELETE' })).status).toBe(404);
  });
}

// On PostgreSQL, the store a fleet under load runs on; the same controller on PGlite is driven end to end by
// the npm start suites and by the simulated-fleet suite. Both stores here cost two cores a minute of CI each.
describePg('rollouts, scaling and drain (PostgreSQL)', () => rolloutSuite('pg'));
