import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seedDemoDeployment, startSimNode, stopSimNodes, waitForExit, type SimNode } from '../../functions/hosts/dev/fleet.js';
import { machines, runtimeReports } from '../../functions/store/schema/index.js';
import { loadIdentity } from '../../agent/state.js';
import { startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';

/**
 * A real agent's heartbeats against a real control plane: every field measured (start-up progress, in-flight
 * counts, warmth, machine status), a generation bump taken in place, and `draining` while the agent stops.
 */
describe('agent reports', () => {
  let plane: TestPlane;
  let node: SimNode;
  let machineId: string;

  const runtimeRow = async () => {
    const [row] = await plane.ports.store.db.select().from(runtimeReports).where(eq(runtimeReports.machineId, machineId));
    return row;
  };
  const machineRow = async () => (await plane.ports.store.db.select().from(machines).where(eq(machines.id, machineId)))[0]!;
  const runtimePid = async (assignmentId: string) =>
    (JSON.parse(await readFile(join(node.stateDir, 'runtimes', `${assignmentId}.json`), 'utf8')) as { pid: number }).pid;

  beforeAll(async () => {
    plane = await startTestPlane({ store: 'pglite' });
    // Slow enough to watch: loading takes 2 s, and 40 tokens stream for 2 s.
    await seedDemoDeployment(
      plane,
      1,
      { loadMs: 2_000, memoryMiB: 64 },
      { runtime: { kind: 'simulated', model: 'sim-chat', ttftMs: 20, tokensPerSecond: 20, loadMs: 2_000, memoryMiB: 64, failureRate: 0 } },
    );
    // The node's local policy allows the simulator (as `nobody` when the agent runs as root).
    const policy = join(plane.dataDir, 'agent-policy.json');
    await writeFile(policy, JSON.stringify({ simulated: true, runAs: { user: 'nobody' } }), { mode: 0o644 });
    node = await startSimNode(plane, 'dgx-reports', join(plane.dataDir, 'nodes'), { env: { LUNANEXA_AGENT_POLICY: policy } });
    machineId = (await waitFor(() => loadIdentity(node.stateDir), { what: 'the identity' })).machineId;
  }, 90_000);
  afterAll(async () => {
    if (node && node.process.exitCode === null && node.process.signalCode === null) await stopSimNodes([node]);
    await plane?.stop();
  });

  it('reports start-up progress against the start timeout, then a ready runtime that is not warm yet', async () => {
    const starting = await waitFor(
      async () => {
        const row = await runtimeRow();
        return row?.state === 'starting' && row.progress ? row : null;
      },
      { what: 'a starting runtime with progress' },
    );
    expect(starting.progress!.timeoutMs).toBe(30 * 60_000);
    expect(starting.progress!.elapsedMs).toBeGreaterThanOrEqual(0);

    const ready = await waitFor(async () => ((await runtimeRow())?.state === 'ready' ? await runtimeRow() : null), { what: 'the runtime to be ready' });
    expect(ready).toMatchObject({ progress: null, warm: false, activeInvocations: 0, queueDepth: 0, restarts: 0 });
    const machine = await machineRow();
    expect(machine.reportedStatus).toBe('ready');
    expect(machine.warmModels).toEqual(['sim-chat']);
  });

  it('reports an invocation streaming while it streams, and the runtime warm once it served', async () => {
    const response = await fetch(`${plane.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${plane.adminToken}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-chat', messages: [{ role: 'user', content: 'hi' }], stream: true, max_tokens: 40 }),
    });
    expect(response.status).toBe(200);
    const body = response.text();
    const streaming = await waitFor(async () => ((await runtimeRow())?.activeInvocations === 1 ? await runtimeRow() : null), {
      intervalMs: 50,
      what: 'the invocation to be reported',
      timeoutMs: 5_000,
    });
    expect(streaming).toMatchObject({ state: 'ready', warm: true, queueDepth: 0 });
    expect(await body).toContain('data: [DONE]');
    const served = await waitFor(async () => ((await runtimeRow())?.activeInvocations === 0 ? await runtimeRow() : null), {
      what: 'the end to be reported',
      timeoutMs: 5_000,
    });
    expect(served).toMatchObject({ warm: true, queueDepth: 0 });
  });

  it('takes a generation bump that leaves the template alone in place: same process, new generation', async () => {
    const before = (await runtimeRow())!;
    const pid = await runtimePid(before.assignmentId);
    const genBefore = (await machineRow()).desiredGen;
    await seedDemoDeployment(
      plane,
      1,
      { loadMs: 2_000, memoryMiB: 64 },
      {
        runtime: { kind: 'simulated', model: 'sim-chat', ttftMs: 20, tokensPerSecond: 20, loadMs: 2_000, memoryMiB: 64, failureRate: 0 },
        restartPolicy: { mode: 'always', maxRestarts: 9, backoffMs: 250 },
      },
    );
    const after = await waitFor(
      async () => {
        const machine = await machineRow();
        const row = await runtimeRow();
        return machine.desiredGen > genBefore && row?.gen === machine.desiredGen ? row : null;
      },
      { what: 'the runtime under the new generation' },
    );
    expect(after).toMatchObject({ assignmentId: before.assignmentId, state: 'ready', restarts: 0 });
    expect(await runtimePid(before.assignmentId)).toBe(pid);
    expect(await readFile(node.logFile, 'utf8')).toContain('runtime updated in place');
  });

  it('reports draining while it stops, and exits cleanly', async () => {
    node.process.kill('SIGTERM');
    expect(await waitForExit(node.process, 20_000)).toBe(0);
    expect((await machineRow()).reportedStatus).toBe('draining');
  });
});
