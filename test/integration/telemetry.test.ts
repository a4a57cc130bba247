import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sweepTelemetry } from '../../functions/services/telemetry.js';
import { seedDemoDeployment } from '../../functions/hosts/dev/fleet.js';
import { assignments, machines, telemetrySamples, workloads } from '../../functions/store/schema/index.js';
import type { MachineView } from '../../shared/contracts/machine.js';
import type { DeploymentTelemetry, MachineTelemetry } from '../../shared/contracts/telemetry.js';
import { enrollTestMachine, heartbeatBody, runtimeReport, type TestMachine } from '../helpers/machine.js';
import { describePg } from '../helpers/pg.js';
import { startTestPlane, type StoreKind, type TestPlane } from '../helpers/plane.js';

/**
 * Telemetry from the nodes (docs/telemetry.md), driven over the real heartbeat protocol: the live GPU and engine
 * numbers in the machine's view and on /metrics, the history kept at most once per interval and read back as series,
 * a deployment's series from its machines' samples and its requests, bad values refused, and retention.
 */
function telemetrySuite(store: StoreKind) {
  let plane: TestPlane;
  let machine: TestMachine;
  let deploymentId: string;
  let assignmentId: string;
  let seq = 0;
  const gpu = (utilizationPercent: number, temperatureC: number) => ({
    index: 0,
    utilizationPercent,
    memoryUsedMiB: 40_000,
    memoryTotalMiB: 122_880,
    temperatureC,
    powerDrawW: 50,
  });
  const engine = { requestsRunning: 3, requestsWaiting: 5, kvCacheUsage: 0.5, promptTokensTotal: 100, generationTokensTotal: 400 };
  const beat = (extra: Record<string, unknown>) => machine.request('POST', '/agent/v1/heartbeat', heartbeatBody(machine, ++seq, extra));

  beforeAll(async () => {
    // Samples are kept at most every second here (the default is 10 s); liveness is slow, heartbeats come when told.
    plane = await startTestPlane({
      store,
      config: { telemetrySampleMs: 1_000, heartbeatIntervalMs: 20_000, machineLifetimeMs: 600_000, runtimeTtlMs: 600_000, metricsPublic: true },
    });
    machine = await enrollTestMachine(plane, 'gpu-1', { sim: 'true' });
    await beat({});
    ({ id: deploymentId } = await seedDemoDeployment(plane, 1, {}, { memoryMiB: 64 }));
    const [placed] = await plane.systemCtx.db.select({ id: assignments.id }).from(assignments).where(eq(assignments.deploymentId, deploymentId));
    assignmentId = placed!.id;
  }, 60_000);
  afterAll(async () => {
    await plane?.close();
  });

  it("shows the GPUs and engines a heartbeat carries in the machine's view and on /metrics", async () => {
    const runtimes = [runtimeReport(assignmentId, deploymentId, { activeInvocations: 2, queueDepth: 1, engine })];
    expect((await beat({ gpus: [gpu(87, 66)], runtimes })).status).toBe(200);
    const view = (await (await plane.admin(`/api/v1/machines/${machine.machineId}`)).json()) as MachineView;
    expect(view.gpus).toEqual([gpu(87, 66)]);
    expect(view.runtimes.find((r) => r.assignmentId === assignmentId)?.engine).toEqual(engine);
    const metrics = await (await fetch(`${plane.url}/metrics`)).text();
    expect(metrics).toContain(`lunanexa_node_gpu{workspace="${plane.workspaceId}",machine="${machine.machineId}",gpu="0",name="utilization_percent"} 87`);
    expect(metrics).toContain(
      `lunanexa_runtime_engine{workspace="${plane.workspaceId}",machine="${machine.machineId}",assignment="${assignmentId}",name="requests_waiting"} 5`,
    );
    // A GPU it no longer reports leaves /metrics: no old number passed off as current.
    expect((await beat({ gpus: [], runtimes })).status).toBe(200);
    expect(await (await fetch(`${plane.url}/metrics`)).text()).not.toContain('lunanexa_node_gpu{');
  });

  it('refuses a GPU sample out of bounds (400) and keeps what it had', async () => {
    const before = (await (await plane.admin(`/api/v1/machines/${machine.machineId}`)).json()) as MachineView;
    for (const bad of [
      { ...gpu(87, 66), utilizationPercent: 101 },
      { ...gpu(87, 66), index: -1 },
      { ...gpu(87, 66), powerDrawW: 'hot' },
    ]) {
      const response = await beat({ gpus: [bad] });
      expect(response.status).toBe(400);
      expect(((await response.json()) as { error: { code: string } }).error.code).toBe('validation_failed');
    }
    const tooMany = await beat({ gpus: Array.from({ length: 17 }, (_, index) => ({ ...gpu(1, 40), index })) });
    expect(tooMany.status).toBe(400);
    const after = (await (await plane.admin(`/api/v1/machines/${machine.machineId}`)).json()) as MachineView;
    expect(after.gpus).toEqual(before.gpus);
  });

  it('keeps a sample at most once per interval and answers it as series, per GPU and per deployment', async () => {
    const db = plane.systemCtx.db;
    await db.delete(telemetrySamples);
    await db.update(machines).set({ telemetryAt: null }).where(eq(machines.id, machine.machineId));
    const runtimes = [runtimeReport(assignmentId, deploymentId, { activeInvocations: 2, queueDepth: 1, engine })];
    // Two heartbeats within the interval keep one sample; one after it keeps another.
    expect((await beat({ gpus: [gpu(20, 45)], runtimes })).status).toBe(200);
    expect((await beat({ gpus: [gpu(99, 99)], runtimes })).status).toBe(200);
    expect(await db.select().from(telemetrySamples)).toHaveLength(1);
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    expect((await beat({ gpus: [gpu(60, 55)], runtimes })).status).toBe(200);
    const kept = await db.select().from(telemetrySamples);
    expect(kept.map((s) => s.gpus[0]!.utilizationPercent).sort()).toEqual([20, 60]);

    const machineSeries = (await (await plane.admin(`/api/v1/machines/${machine.machineId}/telemetry?minutes=5&points=2`)).json()) as MachineTelemetry;
    expect(machineSeries.gpus).toHaveLength(1);
    expect(machineSeries.gpus[0]!.points).toHaveLength(2);
    // Both samples fall in the newest bucket: their mean.
    expect(machineSeries.gpus[0]!.points.at(-1)).toMatchObject({ utilizationPercent: 40, temperatureC: 50, powerDrawW: 50 });
    expect(machineSeries.gpus[0]!.points[0]).toMatchObject({ utilizationPercent: null });

    // Two requests of the deployment with their first byte, as the relay records them.
    const now = new Date();
    for (const [i, firstByteMs] of [100, 300].entries()) {
      await db.insert(workloads).values({
        id: `wl_telemetry_${store}_${i}`,
        workspaceId: plane.workspaceId,
        deploymentId,
        kind: 'chat',
        state: 'succeeded',
        instanceId: 'test',
        deadline: now,
        createdAt: now,
        firstByteMs,
        completionTokens: 60,
      });
    }
    const answered = await plane.admin('/api/v1/deployments/sim-chat/telemetry?minutes=1&points=6');
    expect(answered.status, await answered.clone().text()).toBe(200);
    const deployment = (await answered.json()) as DeploymentTelemetry;
    const newest = deployment.points.at(-1)!;
    expect(deployment.stepMs).toBe(10_000);
    expect(newest).toMatchObject({ replicas: 1, queueDepth: 6, inFlight: 2, kvCacheUsage: 0.5, requests: 2, tokensPerSecond: 12 });
    expect(newest.ttftP95Ms).toBeCloseTo(290, 5);
  });

  it('answers unknown names and bad windows with a 4xx in the API envelope', async () => {
    expect((await plane.admin('/api/v1/machines/mch_0000000000000000000000000/telemetry')).status).toBe(404);
    expect((await plane.admin('/api/v1/deployments/nope/telemetry')).status).toBe(404);
    for (const query of ['minutes=0', 'minutes=abc', 'points=1', 'points=100000']) {
      const response = await plane.admin(`/api/v1/machines/${machine.machineId}/telemetry?${query}`);
      expect(response.status).toBe(400);
      expect(((await response.json()) as { error: { code: string } }).error.code).toMatch(/\S/);
    }
  });

  it('deletes the samples past their retention, oldest first, within the bound of a call', async () => {
    const db = plane.systemCtx.db;
    const hoursAgo = (h: number) => new Date(Date.now() - h * 3_600_000);
    await db
      .insert(telemetrySamples)
      .values([30, 29, 28].map((h) => ({ machineId: machine.machineId, workspaceId: plane.workspaceId, at: hoursAgo(h), gpus: [], runtimes: [] })));
    const before = (await db.select().from(telemetrySamples)).length;
    expect(await sweepTelemetry(plane.systemCtx, 24, 2)).toBe(2);
    expect(await sweepTelemetry(plane.systemCtx, 24, 2)).toBe(1);
    expect(await sweepTelemetry(plane.systemCtx, 24, 2)).toBe(0);
    expect((await db.select().from(telemetrySamples)).length).toBe(before - 3);
  });
}

describe('telemetry (PGlite)', () => telemetrySuite('pglite'));
describePg('telemetry (PostgreSQL)', () => telemetrySuite('pg'));
