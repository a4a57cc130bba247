import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSimNode, stopSimNodes, type SimNode } from '../../functions/hosts/dev/fleet.js';
import { pidAlive } from '../../agent/runtimes/process-group.js';
import type { DeploymentDetail } from '../../shared/contracts/deployment.js';
import { startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';

/**
 * Start-up of slow runtimes on a real agent: the start timeout is the deployment's (30 minutes by default, for
 * large models), progress shows while a replica loads, and a replica scaled away while loading stops at once.
 * Load times are scaled down: what matters is loading longer than a hard-coded default, not the minutes.
 */
describe('runtime start-up', () => {
  let plane: TestPlane;
  let node: SimNode;

  const put = async (name: string, body: Record<string, unknown>) => {
    const response = await plane.admin(`/api/v1/deployments/${name}`, { method: 'PUT', body: JSON.stringify(body) });
    expect(response.status, await response.clone().text()).toBe(200);
  };
  const spec = (name: string, loadMs: number, extra: Record<string, unknown> = {}) => ({
    model: name,
    runtime: { kind: 'simulated', model: name, loadMs, memoryMiB: 64 },
    replicas: 1,
    selector: { sim: 'true' },
    memoryMiB: 64,
    ...extra,
  });
  const detail = async (name: string) => (await (await plane.admin(`/api/v1/deployments/${name}`)).json()) as DeploymentDetail;
  const runtimePid = async (assignmentId: string) => {
    const file = join(node.stateDir, 'runtimes', `${assignmentId}.json`);
    return (JSON.parse(await readFile(file, 'utf8')) as { pid: number }).pid;
  };

  beforeAll(async () => {
    plane = await startTestPlane({ store: 'pglite' });
    node = await startSimNode(plane, 'dgx-1', join(plane.dataDir, 'nodes'));
  }, 60_000);
  afterAll(async () => {
    await stopSimNodes([node]);
    await plane?.stop();
  });

  it('a replica that loads for longer than its start timeout fails and says why; a longer timeout lets the same load succeed', async () => {
    await put('slow', spec('slow', 4_000, { startup: { timeoutMs: 1_500 }, restartPolicy: { mode: 'never' } }));
    // Never restarted, so failed for good: retired, and with no other machine to go to, the deployment says why.
    const failed = await waitFor(
      async () => {
        const d = await detail('slow');
        return d.status.degraded && d.status.degradedReasons.some((r) => /ready in time/.test(r)) ? d : null;
      },
      { timeoutMs: 30_000, what: 'the start timeout' },
    );
    expect(failed.events.map((e) => e.type)).toEqual(expect.arrayContaining(['placed', 'started', 'replica_failed']));

    // A new template (another load time) is tried again on that machine (the mark kept only the failed spec off
    // it); the start timeout is far longer than the load.
    await put('slow', spec('slow', 3_000, { startup: { timeoutMs: 600_000 }, restartPolicy: { mode: 'never' } }));
    const progress = await waitFor(
      async () => {
        const replica = (await detail('slow')).status.replicas.find((r) => r.desired && r.state === 'starting');
        return replica?.progress && replica.progress.elapsedMs > 0 ? replica.progress : null;
      },
      { timeoutMs: 20_000, what: 'start-up progress' },
    );
    expect(progress.timeoutMs).toBe(600_000);
    const ready = await waitFor(async () => ((await detail('slow')).status.ready === 1 ? await detail('slow') : null), {
      timeoutMs: 30_000,
      what: 'the slow replica ready',
    });
    expect(ready.status.rollout.state).toBe('complete');
    expect((await plane.admin('/api/v1/deployments/slow', { method: 'DELETE' })).status).toBe(200);
  });

  it('scaling to 0 while a replica is still loading stops its process at once', async () => {
    await put('loading', spec('loading', 60_000));
    const starting = await waitFor(async () => (await detail('loading')).status.replicas.find((r) => r.state === 'starting'), {
      timeoutMs: 20_000,
      what: 'the replica starting',
    });
    const pid = await runtimePid(starting.assignmentId);
    expect(pidAlive(pid)).toBe(true);
    const asked = performance.now();
    await put('loading', spec('loading', 60_000, { replicas: 0 }));
    await waitFor(async () => !pidAlive(pid), { timeoutMs: 10_000, intervalMs: 50, what: 'the loading runtime stopped' });
    console.log(`stopped a loading replica ${(performance.now() - asked).toFixed(0)} ms after scaling to 0`);
    await waitFor(async () => (await detail('loading')).status.replicas.length === 0, { timeoutMs: 10_000, what: 'no replica left' });
    expect(await readdir(join(node.stateDir, 'runtimes'))).not.toContain(`${starting.assignmentId}.json`);
  });
});
