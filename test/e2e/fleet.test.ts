import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seedDemoDeployment, startSimNode, stopSimNodes, waitForExit, type SimNode } from '../../functions/hosts/dev/fleet.js';
import { pidAlive } from '../../agent/runtimes/process-group.js';
import type { MachineView } from '../../shared/contracts/machine.js';
import { loadIdentity, loadKey } from '../../agent/state.js';
import { signMachineRequest } from '../../shared/machine-jwt.js';
import { startTestPlane, waitFor, type StoreKind, type TestPlane } from '../helpers/plane.js';

/**
 * The simulated fleet end to end: real control plane, real agent processes over loopback HTTP/SSE, real
 * simulated runtimes launched through the process adapter. Timings are the fast test configuration.
 */
function fleetSuite(store: StoreKind) {
  let plane: TestPlane;
  let nodes: SimNode[] = [];
  const nodesDir = () => join(plane.dataDir, 'nodes');

  const machines = async (): Promise<MachineView[]> => {
    const response = await plane.admin('/api/v1/machines');
    expect(response.status).toBe(200);
    return ((await response.json()) as { data: MachineView[] }).data;
  };
  const machine = async (name: string) => (await machines()).find((m) => m.name === name);
  const routable = async (name: string) => {
    const m = await machine(name);
    return m && m.state === 'ready' && m.runtimes.length === 1 && m.runtimes[0]!.routable ? m : null;
  };
  const runtimeRecord = async (node: SimNode) => {
    const dir = join(node.stateDir, 'runtimes');
    const file = (await readdir(dir)).find((f) => f.endsWith('.json'));
    return file ? (JSON.parse(await readFile(join(dir, file), 'utf8')) as { pid: number; assignmentId: string }) : null;
  };

  beforeAll(async () => {
    plane = await startTestPlane({ store });
    await seedDemoDeployment(plane, 2, { loadMs: 100 });
    nodes = await Promise.all(['dgx-1', 'dgx-2'].map((name) => startSimNode(plane, name, nodesDir())));
    await waitFor(async () => (await routable('dgx-1')) && (await routable('dgx-2')), { timeoutMs: 45_000, what: 'two routable nodes' });
  }, 90_000);

  afterAll(async () => {
    await stopSimNodes(nodes);
    await plane?.stop();
  });

  it('lists both nodes with inventory, fresh heartbeats and the signed generation they run', async () => {
    const list = await machines();
    // The list pages in enrollment order; the two enroll concurrently.
    expect(list.map((m) => m.name).sort()).toEqual(['dgx-1', 'dgx-2']);
    for (const m of list) {
      expect(m.streamAttached).toBe(true);
      expect(m.heartbeatAgeMs).toBeLessThan(2_000);
      expect(m.inventory.cpus).toBeGreaterThan(0);
      expect(m.reportedGen).toBe(m.desiredGen);
      expect(m.runtimes[0]).toMatchObject({ deploymentName: 'sim-chat', model: 'sim-chat', state: 'ready', restarts: 0 });
    }
  });

  it("fetches a runtime's log tail over the node's own stream; another machine cannot upload it", async () => {
    const node = (await machine('dgx-1'))!;
    const assignmentId = node.runtimes[0]!.assignmentId;
    const response = await plane.admin(`/api/v1/machines/${node.id}/runtimes/${assignmentId}/logs?lines=50`);
    expect(response.status).toBe(200);
    const { lines } = (await response.json()) as { lines: string[] };
    expect(lines.some((line) => line.includes('"event":"listening"'))).toBe(true);

    // dgx-2 signs with its own key, for dgx-1's runtime.
    const other = nodes[1]!;
    const identity = (await loadIdentity(other.stateDir))!;
    const path = `/agent/v1/runtimes/${assignmentId}/logs`;
    const body = JSON.stringify({ requestId: 'forged', lines: ['forged line'] });
    const jwt = await signMachineRequest({
      key: await loadKey(other.stateDir),
      kid: identity.credentialId,
      machineId: identity.machineId,
      clusterId: identity.clusterId,
      method: 'POST',
      path,
      body,
    });
    const forged = await fetch(`${plane.url}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${jwt}`, 'content-type': 'application/json' },
      body,
    });
    expect(forged.status).toBe(403);
    expect(((await forged.json()) as { error: { code: string } }).error.code).toBe('forbidden_machine');
  });

  it('restarts a crashed runtime by policy and reports it', async () => {
    const node = nodes[0]!;
    const before = await runtimeRecord(node);
    expect(before && pidAlive(before.pid)).toBe(true);
    process.kill(before!.pid, 'SIGKILL');
    const failedSeen = await waitFor(
      async () => {
        const m = await machine(node.name);
        return m?.runtimes[0]?.restarts === 1 ? m : null;
      },
      { what: 'restart count 1' },
    );
    expect(failedSeen.runtimes[0]!.restarts).toBe(1);
    const after = await waitFor(async () => ((await routable(node.name)) ? await runtimeRecord(node) : null), { what: 'runtime ready again' });
    expect(after.pid).not.toBe(before!.pid);
    expect(after.assignmentId).toBe(before!.assignmentId);
  });

  it('shows a killed agent stale then down on schedule, leaves the other node alone, and re-adopts its runtime on return', async () => {
    const victim = nodes[1]!;
    const runtime = await runtimeRecord(victim);
    const killedAt = Date.now();
    victim.process.kill('SIGKILL');
    await waitForExit(victim.process);

    const staleAt = await waitFor(async () => ((await machine('dgx-2'))?.state === 'stale' ? Date.now() : null), { intervalMs: 50, what: 'stale' });
    expect((await machine('dgx-2'))!.runtimes[0]!.routable).toBe(false);
    const downAt = await waitFor(async () => ((await machine('dgx-2'))?.state === 'down' ? Date.now() : null), { intervalMs: 50, what: 'down' });
    const config = plane.ports.config;
    const down = (await machine('dgx-2'))!;
    // Not before the rules say so, counted from the last heartbeat the control plane recorded (the kill may come
    // any time after it; the database and this process read the same host clock).
    const lastHeartbeat = Date.parse(down.lastHeartbeatAt!);
    expect(lastHeartbeat).toBeLessThanOrEqual(killedAt + 50);
    expect(staleAt - lastHeartbeat).toBeGreaterThanOrEqual(config.heartbeatIntervalMs + config.runtimeGraceMs);
    expect(downAt - lastHeartbeat).toBeGreaterThanOrEqual(config.machineLifetimeMs);
    expect(downAt).toBeGreaterThan(staleAt);
    expect(down.runtimes[0]!.state).toBe('down');
    // The assignment stays: sight was lost, the runtime did not stop.
    expect(down.runtimes[0]!.assignmentId).toBe(runtime!.assignmentId);
    expect(pidAlive(runtime!.pid)).toBe(true);
    expect(await routable('dgx-1')).toBeTruthy();

    const revived = await startSimNode(plane, 'dgx-2', nodesDir());
    nodes[1] = revived;
    const back = await waitFor(() => routable('dgx-2'), { what: 'dgx-2 routable again' });
    expect(back.id).toBe(down.id);
    expect(back.runtimes[0]!.restarts).toBe(0);
    expect((await runtimeRecord(revived))!.pid).toBe(runtime!.pid);
    expect(await readFile(revived.logFile, 'utf8')).toContain('runtime adopted');
  });

  it('survives a control-plane restart: agents reconnect, nothing re-enrolls, desired state is resent', async () => {
    const before = await machines();
    const connectsBefore = await Promise.all(nodes.map(async (n) => (await readFile(n.logFile, 'utf8')).split('stream open').length));
    plane = await plane.restart();
    // Leases of the old instance may still be unexpired: wait for the agents' own new connections.
    const connects = () => Promise.all(nodes.map(async (n) => (await readFile(n.logFile, 'utf8')).split('stream open').length));
    await waitFor(async () => (await connects()).every((count, i) => count > connectsBefore[i]!), { timeoutMs: 45_000, what: 'agents reconnected' });
    const after = await waitFor(async () => ((await routable('dgx-1')) && (await routable('dgx-2')) ? await machines() : null), {
      timeoutMs: 45_000,
      what: 'both nodes routable after restart',
    });
    expect(after.map((m) => m.id)).toEqual(before.map((m) => m.id));
    expect(after.every((m) => m.reportedGen === m.desiredGen)).toBe(true);
    for (const n of nodes) expect(await readFile(n.logFile, 'utf8')).not.toMatch(/"event":"enrolled"[\s\S]*"event":"enrolled"/);
  });

  it('revocation closes the stream at once; the agent stops and its next request is refused', async () => {
    const target = (await machine('dgx-1'))!;
    const response = await plane.admin(`/api/v1/machines/${target.id}/revoke`, { method: 'POST', body: JSON.stringify({ reason: 'test' }) });
    expect(response.status).toBe(200);
    expect(((await response.json()) as MachineView).state).toBe('revoked');
    const code = await waitForExit(nodes[0]!.process, 10_000);
    expect(code).toBe(3);
    // The agent learns it from the stream's `revoked` event or, when its next heartbeat gets there first on
    // a loaded machine, from the refusal: either way it stops with code 3.
    const log = await readFile(nodes[0]!.logFile, 'utf8');
    expect(log).toMatch(/machine revoked|machine_revoked/);
    await waitFor(async () => (await machine('dgx-1'))!.streamAttached === false, { timeoutMs: 5_000, what: 'dgx-1 stream detached' });
  });
}

// On PGlite, the embedded store `npm start` runs: a restart here reopens the same files. Recovery on PostgreSQL is
// driven by the rollout, instance-crash and database-outage suites.
describe('simulated fleet on PGlite: failures and recovery', () => fleetSuite('pglite'));
