import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSimNode, stopSimNodes, type SimNode } from '../../functions/hosts/dev/fleet.js';
import { createApiToken } from '../../functions/services/api-tokens.js';
import type { DeploymentDetail, DeploymentStatus } from '../../shared/contracts/deployment.js';
import type { MachineView } from '../../shared/contracts/machine.js';
import { STEADY_LIVENESS, startTestPlane, waitFor, type StoreKind, type TestPlane } from '../helpers/plane.js';

/**
 * One replica, one restart allowed, a short backoff and quick probes: a runtime that keeps dying gives up within
 * seconds. A load of 1.5 s keeps the replacement short of ready long enough for the status reads to see it degraded.
 */
const spec = (replicas: number) => ({
  model: 'flaky-chat',
  runtime: { kind: 'simulated', model: 'flaky-chat', ttftMs: 5, tokensPerSecond: 0, loadMs: 1500, memoryMiB: 64, failureRate: 0 },
  restartPolicy: { mode: 'on-failure', maxRestarts: 1, backoffMs: 200 },
  startup: { timeoutMs: 60_000, probeIntervalMs: 200, failureThreshold: 1 },
  replicas,
  selector: { sim: 'true' },
  memoryMiB: 64,
});

/**
 * A runtime kill loop on one node (the fault of a runtime that crashes at every start): every simulated runtime
 * the node launches is killed as soon as its record names it. Each process is killed once, and only when it is
 * a simulated runtime, so that a pid reused by another process is never touched.
 */
function killLoop(node: SimNode): { stop(): Promise<number> } {
  const killed = new Set<number>();
  let running = true;
  const loop = (async () => {
    const dir = join(node.stateDir, 'runtimes');
    while (running) {
      for (const file of (await readdir(dir).catch(() => [])).filter((f) => f.endsWith('.json'))) {
        const record = await readFile(join(dir, file), 'utf8').then(
          (text) => JSON.parse(text) as { pid: number },
          () => null,
        );
        if (!record || killed.has(record.pid)) continue;
        const cmdline = await readFile(`/proc/${record.pid}/cmdline`, 'utf8').catch(() => '');
        if (!cmdline.includes('sim-runtime')) continue;
        killed.add(record.pid);
        process.kill(-record.pid, 'SIGKILL');
      }
      await new Promise((r) => setTimeout(r, 25));
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return killed.size;
    },
  };
}

/**
 * A replica whose runtime fails past its restart limit, with real agent processes and real simulated runtimes: it
 * is replaced on the other machine, which serves; the failed machine is marked for the operator until cleared; and
 * the deployment says it is degraded, and why, while it is short.
 */
function replacedSuite(store: StoreKind) {
  let plane: TestPlane;
  let nodes: SimNode[] = [];
  let viewer: string;

  const put = async (body: unknown) => {
    const response = await plane.admin('/api/v1/deployments/flaky-chat', { method: 'PUT', body: JSON.stringify(body) });
    expect(response.status, await response.clone().text()).toBe(200);
  };
  const detail = async (): Promise<DeploymentDetail> => {
    const response = await plane.admin('/api/v1/deployments/flaky-chat');
    expect(response.status).toBe(200);
    return (await response.json()) as DeploymentDetail;
  };
  const machine = async (id: string): Promise<MachineView> => {
    const response = await plane.admin(`/api/v1/machines/${id}`);
    expect(response.status).toBe(200);
    return (await response.json()) as MachineView;
  };
  const chat = async () =>
    await fetch(`${plane.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${plane.adminToken}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'flaky-chat', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
    });
  const readyOn = (d: DeploymentDetail) => d.status.replicas.filter((r) => r.desired && r.routable).map((r) => r.machineName);

  beforeAll(async () => {
    plane = await startTestPlane({ store, config: STEADY_LIVENESS });
    nodes = await Promise.all(['node-a', 'node-b'].map((name) => startSimNode(plane, name, join(plane.dataDir, 'nodes'))));
    await waitFor(
      async () => {
        const { data } = (await (await plane.admin('/api/v1/machines')).json()) as { data: MachineView[] };
        return data.length === 2 && data.every((m) => m.state === 'ready' && m.streamAttached);
      },
      { timeoutMs: 45_000, what: 'two ready machines' },
    );
    viewer = (await createApiToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name: 'viewer', role: 'viewer' } })).token;
  }, 90_000);

  afterAll(async () => {
    await stopSimNodes(nodes);
    await plane?.stop();
  });

  let failedId: string;
  let failedName: string;
  let otherName: string;

  it('a replica that keeps failing on one machine is replaced on the other, which serves; the deployment said degraded while short', async () => {
    await put(spec(1));
    const placed = (await waitFor(async () => (await detail()).status.replicas.find((r) => r.desired), { what: 'the replica placed' }))!;
    failedId = placed.machineId;
    failedName = placed.machineName;
    otherName = failedName === 'node-a' ? 'node-b' : 'node-a';
    const kills = killLoop(nodes.find((n) => n.name === failedName)!);

    // Every status read while it recovers: the degraded ones must say why.
    const seen: DeploymentStatus[] = [];
    let watching = true;
    const watcher = (async () => {
      while (watching) {
        seen.push((await detail()).status);
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
    let recovered: DeploymentDetail;
    let killed: number;
    try {
      recovered = await waitFor(
        async () => {
          const d = await detail();
          return readyOn(d).length === 1 && readyOn(d)[0] === otherName ? d : null;
        },
        { timeoutMs: 45_000, what: `the replica ready on ${otherName}` },
      );
    } finally {
      watching = false;
      await watcher;
      killed = await kills.stop();
    }
    // The first launch and its one restart.
    expect(killed).toBe(2);

    const degraded = seen.filter((s) => s.degraded);
    expect(degraded.length).toBeGreaterThan(0);
    for (const s of degraded) {
      expect(s.ready).toBe(0);
      // Why, naming the failed machine: its failure, or (while the replacement is being placed) its mark.
      expect(
        s.degradedReasons.some((reason) => reason.includes(failedName)),
        JSON.stringify(s.degradedReasons),
      ).toBe(true);
    }
    expect(degraded.some((s) => s.degradedReasons.some((reason) => reason.endsWith('after 1 restart')))).toBe(true);
    expect(recovered.status).toMatchObject({ desired: 1, ready: 1, failed: 0, degraded: false, degradedReasons: [] });
    expect(recovered.events.filter((e) => e.type === 'replica_failed')).toEqual([
      expect.objectContaining({
        machineId: failedId,
        message: expect.stringMatching(new RegExp(`^replica failed on ${failedName}: runtime process exited.* after 1 restart$`)),
      }),
    ]);

    const response = await chat();
    expect(response.status, await response.clone().text()).toBe(200);
    expect(((await response.json()) as { model: string }).model).toBe('flaky-chat');
  });

  it("the failed machine's view shows the failure; the mark keeps the deployment off it until an operator clears it", async () => {
    const marked = await machine(failedId);
    expect(marked.attention).toEqual([
      {
        deploymentId: (await detail()).id,
        deploymentName: 'flaky-chat',
        assignmentId: expect.any(String),
        reason: expect.stringMatching(/^runtime process exited.* after 1 restart$/),
        failedAt: expect.any(String),
      },
    ]);
    expect(marked.runtimes.filter((r) => r.desired)).toEqual([]);

    // A second replica has nowhere to go: the other machine runs one, and this one is marked.
    await put(spec(2));
    const short = (await detail()).status;
    expect(short).toMatchObject({ desired: 2, ready: 1, unplaceable: 1, degraded: true });
    expect(Object.fromEntries(short.unplaceableReasons.map((r) => [r.machineName, r.reason]))).toEqual({
      [failedName]: `replica failed here: ${marked.attention[0]!.reason}`,
      [otherName]: 'already runs a replica of this deployment',
    });

    const weak = await fetch(`${plane.url}/api/v1/machines/${failedId}/clear-failures`, { method: 'POST', headers: { authorization: `Bearer ${viewer}` } });
    expect(weak.status).toBe(403);
    expect(((await weak.json()) as { error: { code: string } }).error.code).toBe('forbidden');
    const cleared = await plane.admin(`/api/v1/machines/${failedId}/clear-failures`, { method: 'POST' });
    expect(cleared.status).toBe(200);
    expect(((await cleared.json()) as MachineView).attention).toEqual([]);

    const both = await waitFor(
      async () => {
        const d = await detail();
        return readyOn(d).length === 2 ? d : null;
      },
      { timeoutMs: 45_000, what: 'two ready replicas after the mark is cleared' },
    );
    expect(readyOn(both).sort()).toEqual(['node-a', 'node-b']);
    expect(both.status).toMatchObject({ unplaceable: 0, degraded: false, degradedReasons: [] });
    expect((await chat()).status).toBe(200);
  });
}

// On the embedded store only: the store-side logic (the mark, the retirement, the status) runs on both stores in
// test/integration/replica-failures.test.ts, and these real agents take a minute and a half per store.
describe('a replica that keeps failing is replaced (PGlite)', () => replacedSuite('pglite'));
