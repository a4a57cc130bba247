import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { and, eq, isNull } from 'drizzle-orm';
import { reconcileOnce } from '../../functions/controller/driver.js';
import { assignments } from '../../functions/store/schema/index.js';
import { applyTestDeployment } from '../helpers/deployments.js';
import { enrollTestMachine, heartbeatBody, type TestMachine } from '../helpers/machine.js';
import { startTestPlane, type TestPlane } from '../helpers/plane.js';
import { SseReader } from '../helpers/sse.js';

/**
 * Identity (issue 7, finding 3): a runtime's log answer is accepted only from the machine that was asked, for
 * the runtime it was asked about. Small-order keys and machine-declared labels are covered by the enrollment
 * and machine-auth suites.
 */
describe('a log answer is accepted only from the machine asked, for the runtime asked', () => {
  let plane: TestPlane;
  let a: TestMachine;
  let b: TestMachine;
  let asgA: string;
  let asgB: string;

  beforeAll(async () => {
    plane = await startTestPlane({
      store: 'pglite',
      config: { heartbeatIntervalMs: 10_000, runtimeGraceMs: 10_000, machineLifetimeMs: 60_000, runtimeTtlMs: 60_000 },
    });
    a = await enrollTestMachine(plane, 'logs-a', { who: 'a' });
    b = await enrollTestMachine(plane, 'logs-b', { who: 'b' });
    for (const m of [a, b]) expect((await m.request('POST', '/agent/v1/heartbeat', heartbeatBody(m, 1))).status).toBe(200);
    const depA = await applyTestDeployment(plane, 'logs-on-a', { who: 'a' });
    const depB = await applyTestDeployment(plane, 'logs-on-b', { who: 'b' });
    await reconcileOnce({ ctx: plane.systemCtx });
    const placed = async (deploymentId: string) =>
      (
        await plane.ports.store.db
          .select()
          .from(assignments)
          .where(and(eq(assignments.deploymentId, deploymentId), isNull(assignments.removedAt)))
      )[0]!;
    const [onA, onB] = [await placed(depA.id), await placed(depB.id)];
    expect(onA.machineId).toBe(a.machineId);
    expect(onB.machineId).toBe(b.machineId);
    asgA = onA.id;
    asgB = onB.id;
  });
  afterAll(async () => {
    await plane?.stop();
  });

  it("ignores another machine's answer (and the asked machine's answer for another runtime), and returns the right one", async () => {
    const controller = new AbortController();
    const stream = await fetch(`${plane.url}/agent/v1/stream`, {
      headers: { authorization: `Bearer ${await a.sign('GET', '/agent/v1/stream', '')}` },
      signal: controller.signal,
    });
    expect(stream.status).toBe(200);
    const reader = new SseReader(stream.body!);
    try {
      const answer = plane.admin(`/api/v1/machines/${a.machineId}/runtimes/${asgA}/logs?lines=5`);
      let asked: { requestId: string; assignmentId: string } | null = null;
      while (!asked) {
        const event = await reader.nextEvent(5_000);
        expect(event).not.toBeNull();
        if (event!.event === 'logs') asked = JSON.parse(event!.data) as { requestId: string; assignmentId: string };
      }
      expect(asked.assignmentId).toBe(asgA);

      // B answers first, under its own runtime (the only one it may upload for), with A's request id.
      const forged = await b.request('POST', `/agent/v1/runtimes/${asgB}/logs`, { requestId: asked.requestId, lines: ['forged by b'] });
      expect(forged.status).toBeLessThan(500);
      // Then A answers the request under the wrong runtime of its own... it has only one: B's is refused outright.
      const foreign = await a.request('POST', `/agent/v1/runtimes/${asgB}/logs`, { requestId: asked.requestId, lines: ['wrong runtime'] });
      expect(foreign.status).toBe(403);
      await new Promise((r) => setTimeout(r, 100));
      const real = await a.request('POST', `/agent/v1/runtimes/${asgA}/logs`, { requestId: asked.requestId, lines: ['line from a'] });
      expect(real.status).toBe(202);

      const response = await answer;
      expect(response.status).toBe(200);
      expect(await response.json()).toEqual({ lines: ['line from a'] });
    } finally {
      controller.abort();
    }
  });
});
