import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { seedDemoDeployment, startSimNode, stopSimNodes, type SimNode } from '../../functions/hosts/dev/fleet.js';
import { controllerTick } from '../../functions/controller/driver.js';
import type { MachineView } from '../../shared/contracts/machine.js';
import type { SimStats } from '../../sim/options.js';
import { enrollTestMachine, heartbeatBody, type TestMachine } from '../helpers/machine.js';
import { createTestDatabase, describePg } from '../helpers/pg.js';
import { STEADY_LIVENESS, startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';
import { spawnControlPlane, type PlaneProcess } from '../helpers/plane-process.js';
import { startBalancer, type Balancer } from '../helpers/balancer.js';

/**
 * A control-plane instance SIGKILLed mid-stream (issue 11, items 2 and 3): instance A runs in its own process,
 * instance B in this one, on one PostgreSQL; the agent reaches them through a failover balancer, so its stream
 * lands on A first and on B after A dies. What A held must not outlive it: its stream leases stop counting once
 * its short instance lease lapses, the node aborts the generations nobody waits for, their workloads are
 * recorded as failed, a retry with the same Idempotency-Key runs again, and a cancel says it cannot reach them.
 */
const LEASE_MS = 2_000;
const MODEL = 'crash-chat';

describePg('a control-plane instance killed mid-stream', () => {
  let db: { url: string; drop(): Promise<void> };
  let planeB: TestPlane;
  let planeA: PlaneProcess;
  let balancer: Balancer;
  let node: SimNode;
  let ghost: TestMachine;
  let nodeId: string;
  let root: string;

  const view = async (machineId: string) => (await (await planeB.admin(`/api/v1/machines/${machineId}`)).json()) as MachineView;
  const chat = (url: string, body: Record<string, unknown>, key: string) =>
    fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${planeB.adminToken}`, 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], ...body }),
    });
  const stats = async (): Promise<SimStats | null> => {
    const dir = join(node.stateDir, 'runtimes');
    for (const file of (await readdir(dir).catch(() => [] as string[])).filter((f) => f.endsWith('.json'))) {
      const record = JSON.parse(await readFile(join(dir, file), 'utf8')) as { baseUrl: string; token: string };
      const response = await fetch(`${record.baseUrl}/sim/stats`, { headers: { authorization: `Bearer ${record.token}` } }).catch(() => null);
      if (response?.ok) return (await response.json()) as SimStats;
    }
    return null;
  };

  beforeAll(async () => {
    db = await createTestDatabase();
    root = await mkdtemp(join(tmpdir(), 'lnx-crash-'));
    // B sweeps only when the test ticks it, so that the cancel below meets a workload nobody swept yet.
    planeB = await startTestPlane({
      store: 'pg',
      databaseUrl: db.url,
      config: { ...STEADY_LIVENESS, instanceLeaseTtlMs: LEASE_MS, reconcileIntervalMs: 60_000 },
    });
    planeA = await spawnControlPlane({
      databaseUrl: db.url,
      dataDir: join(root, 'a'),
      env: {
        LUNANEXA_SIM_NODES: '0',
        LUNANEXA_INSTANCE_LEASE_TTL_MS: String(LEASE_MS),
        LUNANEXA_HEARTBEAT_INTERVAL_MS: String(STEADY_LIVENESS.heartbeatIntervalMs),
        LUNANEXA_STREAM_KEEPALIVE_MS: String(STEADY_LIVENESS.streamKeepAliveMs),
        LUNANEXA_STREAM_PING_MS: '1000',
        LUNANEXA_STREAM_PING_TIMEOUT_MS: '6000',
      },
    });
    balancer = await startBalancer([planeA.port, planeB.port], 'failover');
    // 10 tokens a second: a 300-token generation would run 30 s, long after the kill.
    await seedDemoDeployment(planeB, 1, { loadMs: 100, memoryMiB: 256, tokensPerSecond: 10 }, { name: MODEL });
    node = await startSimNode({ ...planeB, url: balancer.url }, 'crash-node', join(root, 'nodes'));
    nodeId = await waitFor(
      async () => ((await (await planeB.admin('/api/v1/machines')).json()) as { data: MachineView[] }).data.find((m) => m.name === 'crash-node')?.id,
      { timeoutMs: 60_000, what: 'the node to enroll' },
    );
    await waitFor(async () => (await view(nodeId)).runtimes.some((r) => r.routable), { timeoutMs: 60_000, what: 'the replica to be routable' });
    // A machine whose stream is held by A and that will never reconnect: only A's death can detach it.
    ghost = await enrollTestMachine(planeB, 'ghost', { site: 'nowhere' });
    expect((await ghost.request('POST', '/agent/v1/heartbeat', heartbeatBody(ghost, 1))).status).toBe(200);
  }, 180_000);

  afterAll(async () => {
    planeA?.process.kill('SIGKILL');
    if (node) await stopSimNodes([node]);
    await balancer?.close();
    await planeB?.stop();
    await db?.drop();
    await rm(root, { recursive: true, force: true });
  });

  it('detaches its machines within the instance lease, aborts orphaned generations, and lets their keys run again', async () => {
    const ghostStream = await fetch(`${planeA.url}/agent/v1/stream`, {
      headers: { authorization: `Bearer ${await ghost.sign('GET', '/agent/v1/stream', '')}` },
    });
    expect(ghostStream.status).toBe(200);
    const ghostReader = ghostStream.body!.getReader();
    await ghostReader.read();
    await waitFor(async () => (await view(ghost.machineId)).streamAttached, { timeoutMs: 10_000, what: 'the ghost to be attached through A' });

    // Two long generations through A, both past their first token.
    const first = await chat(planeA.url, { stream: true, max_tokens: 300 }, 'crash-key-1');
    const second = await chat(planeA.url, { stream: true, max_tokens: 300 }, 'crash-key-2');
    expect([first.status, second.status]).toEqual([200, 200]);
    const [firstId, secondId] = [first.headers.get('x-lunanexa-workload-id')!, second.headers.get('x-lunanexa-workload-id')!];
    await first.body!.getReader().read();
    await second.body!.getReader().read();
    await waitFor(async () => ((await stats())?.active ?? 0) >= 2, { timeoutMs: 10_000, what: 'both generations to run on the node' });
    const abortedBefore = (await stats())!.aborted;

    planeA.process.kill('SIGKILL');
    const killedAt = Date.now();

    // The ghost's stream lease (45 s by default) outlives A; A's instance lease does not.
    await waitFor(async () => !(await view(ghost.machineId)).streamAttached, { timeoutMs: 15_000, what: 'the ghost to be detached' });
    const detachedAfterMs = Date.now() - killedAt;
    expect(detachedAfterMs).toBeLessThan(15_000);

    // The node aborted both runtime calls when its stream to A broke (30 s of generation were left).
    await waitFor(
      async () => {
        const now = await stats();
        return now !== null && now.active === 0 && now.aborted >= abortedBefore + 2;
      },
      { timeoutMs: 15_000, what: 'the node to abort the orphaned generations' },
    );

    // A cancel of a workload whose holder is gone says so, and records it as failed.
    const cancel = await planeB.admin(`/api/v1/workloads/${secondId}/cancel`, { method: 'POST' });
    expect(cancel.status).toBe(409);
    expect(((await cancel.json()) as { error: { code: string } }).error.code).toBe('workload_unreachable');
    expect(await (await planeB.admin(`/api/v1/workloads/${secondId}`)).json()).toMatchObject({ state: 'failed', errorCode: 'holder_lost' });

    // The sweeper records the other one as failed too.
    await controllerTick({ ctx: planeB.systemCtx });
    expect(await (await planeB.admin(`/api/v1/workloads/${firstId}`)).json()).toMatchObject({ state: 'failed', errorCode: 'holder_lost' });

    // Its key runs again, once, under the same workload id (the node is on B now); then it is spent.
    await waitFor(async () => (await view(nodeId)).runtimes.some((r) => r.routable), { timeoutMs: 30_000, what: 'the node to be routable through B' });
    const retry = await chat(planeB.url, { stream: false, max_tokens: 3 }, 'crash-key-1');
    expect(retry.status).toBe(200);
    expect(retry.headers.get('x-lunanexa-workload-id')).toBe(firstId);
    const again = await chat(planeB.url, { stream: false, max_tokens: 3 }, 'crash-key-1');
    expect(again.status).toBe(409);
    console.log(`instance SIGKILL: a machine attached only through it detached after ${detachedAfterMs} ms (instance lease ${LEASE_MS} ms)`);
  }, 120_000);
});
