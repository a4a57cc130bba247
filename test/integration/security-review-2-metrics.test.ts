import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { applyDeployment } from '../../functions/services/deployments.js';
import { createApiToken } from '../../functions/services/api-tokens.js';
import type { WorkspaceCreated } from '../../shared/contracts/tokens.js';
import { enrollTestMachine, heartbeatBody, startStartingMachine, type TestMachine } from '../helpers/machine.js';
import { STEADY_LIVENESS, startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';

/**
 * `GET /metrics` across workspaces (second security review, M3): a viewer of one workspace scraped the series of
 * every workspace (machines, deployments, models, traffic) while the same token's API showed it nothing. Each
 * token now scrapes only its own workspace's series; the whole set is for an admin of the default workspace or
 * the installation's scrape token (docs/operations.md, "Metrics").
 */

const SCRAPE_TOKEN = `scrape-${'s'.repeat(40)}`;
/** Sample lines: `name{labels} value`, or `name value`. */
const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$/;

describe('/metrics shows each workspace only its own series (security review 2, M3)', () => {
  let plane: TestPlane;
  let holder: { machine: TestMachine; stop(): Promise<void> };
  let acmeNode: TestMachine;
  let tenantNode: TestMachine;
  let tenantWorkspace: string;
  let tenantViewer: string;
  let rootViewer: string;
  let rootInference: string;

  const scrape = async (token?: string) => {
    const response = await fetch(`${plane.url}/metrics`, { headers: token ? { authorization: `Bearer ${token}` } : {} });
    return { status: response.status, text: await response.text() };
  };

  beforeAll(async () => {
    plane = await startTestPlane({ store: 'pglite', config: { ...STEADY_LIVENESS, metricsToken: SCRAPE_TOKEN } });
    // The default workspace: a deployment of a secret project on a machine whose replica is still starting.
    holder = await startStartingMachine(plane, 'acme-gpu-01', { pool: 'acme' });
    await applyDeployment({
      ctx: plane.systemCtx,
      input: {
        workspaceId: plane.workspaceId,
        name: 'acme-secret-project',
        model: 'acme-internal-llm',
        runtime: { kind: 'simulated', model: 'acme-internal-llm', ttftMs: 20, tokensPerSecond: 200, loadMs: 100, memoryMiB: 64, failureRate: 0 },
        artifact: null,
        restartPolicy: { mode: 'on-failure', maxRestarts: 5, backoffMs: 500 },
        replicas: 1,
        selector: { pool: 'acme' },
        gpus: 0,
        memoryMiB: 64,
        queueCapacity: 1,
      },
    });
    await waitFor(
      async () => {
        await plane.ports.dataPlane.routing.refresh();
        return plane.ports.dataPlane.routing.resolve(plane.workspaceId, 'acme-secret-project')?.startingReplicas === 1;
      },
      { timeoutMs: 15_000, what: 'acme-secret-project starting' },
    );
    acmeNode = await enrollTestMachine(plane, 'acme-gpu-02');
    expect((await acmeNode.request('POST', '/agent/v1/heartbeat', heartbeatBody(acmeNode, 1, { metrics: { load1: 5.7 } }))).status).toBe(200);
    rootViewer = (await createApiToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name: 'root viewer', role: 'viewer' } })).token;
    rootInference = (await createApiToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name: 'app', role: 'inference' } })).token;

    // Traffic: one request held for the starting replica (its deadline ends it), one refused by admission.
    const chat = (deadline?: number) =>
      fetch(`${plane.url}/v1/chat/completions`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${rootInference}`,
          'content-type': 'application/json',
          ...(deadline ? { 'x-lunanexa-deadline': String(deadline) } : {}),
        },
        body: JSON.stringify({ model: 'acme-secret-project', messages: [{ role: 'user', content: 'hello' }], max_tokens: 4 }),
      });
    const held = chat(Date.now() + 2_500);
    await waitFor(async () => plane.ports.dataPlane.live.size > 0, { timeoutMs: 5_000, intervalMs: 20, what: 'the first request held' });
    expect((await chat()).status).toBe(429);
    expect((await held).status).toBe(504);

    // Another tenant, made as an operator makes one: its admin, its viewer, its own machine.
    const created = await fetch(`${plane.url}/api/v1/workspaces`, {
      method: 'POST',
      headers: { authorization: `Bearer ${plane.adminToken}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'tenant-c' }),
    });
    expect(created.status).toBe(201);
    const tenant = (await created.json()) as WorkspaceCreated;
    tenantWorkspace = tenant.workspace.id;
    const viewer = await fetch(`${plane.url}/api/v1/tokens`, {
      method: 'POST',
      headers: { authorization: `Bearer ${tenant.adminToken.token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'grafana', role: 'viewer' }),
    });
    expect(viewer.status).toBe(201);
    tenantViewer = ((await viewer.json()) as { token: string }).token;
    tenantNode = await enrollTestMachine(plane, 'tenant-gpu-01', {}, tenantWorkspace);
    expect((await tenantNode.request('POST', '/agent/v1/heartbeat', heartbeatBody(tenantNode, 1, { metrics: { load1: 1.25 } }))).status).toBe(200);
  }, 60_000);

  afterAll(async () => {
    await holder?.stop();
    await plane?.stop();
  });

  it("a viewer of another workspace sees none of the default workspace's machines, deployments, models or traffic", async () => {
    const { status, text } = await scrape(tenantViewer);
    expect(status).toBe(200);
    expect(text).not.toContain('acme');
    expect(text).not.toContain(acmeNode.machineId);
    expect(text).not.toContain(holder.machine.machineId);
    expect(text).not.toContain(plane.workspaceId);
    // As its API: nothing of the default workspace.
    const deployments = await fetch(`${plane.url}/api/v1/deployments`, { headers: { authorization: `Bearer ${tenantViewer}` } });
    expect(((await deployments.json()) as { data: unknown[] }).data).toEqual([]);
    // Its own machine's series, labelled with its workspace.
    expect(text).toContain(`lunanexa_node_metric{workspace="${tenantWorkspace}",machine="${tenantNode.machineId}",name="load1"} 1.25`);
    // Nothing of the installation as a whole either (every workspace's heartbeats, the process).
    expect(text).not.toMatch(/^lunanexa_heartbeats_total/m);
    expect(text).not.toMatch(/^lunanexa_machines\{/m);
  });

  it("a viewer of the default workspace sees its own workspace's series and not the tenant's", async () => {
    const { status, text } = await scrape(rootViewer);
    expect(status).toBe(200);
    expect(text).toContain(`lunanexa_node_metric{workspace="${plane.workspaceId}",machine="${acmeNode.machineId}",name="load1"} 5.7`);
    expect(text).toMatch(/^lunanexa_admission_rejected_total\{[^}]*deployment="acme-secret-project"[^}]*\} 1$/m);
    expect(text).not.toContain(tenantNode.machineId);
    expect(text).not.toContain(tenantWorkspace);
    expect(text).not.toMatch(/^lunanexa_heartbeats_total/m);
  });

  it("the default workspace's admin and the installation's scrape token see every workspace and the installation", async () => {
    for (const token of [plane.adminToken, SCRAPE_TOKEN]) {
      const { status, text } = await scrape(token);
      expect(status).toBe(200);
      expect(text).toContain(acmeNode.machineId);
      expect(text).toContain(tenantNode.machineId);
      expect(text).toContain('deployment="acme-secret-project"');
      expect(text).toMatch(/^lunanexa_heartbeats_total\{result="ok"\} \d+$/m);
    }
  });

  it("a filtered answer is well-formed exposition text: each sample under its family's TYPE, as the full answer has it", async () => {
    const full = (await scrape(SCRAPE_TOKEN)).text.split('\n');
    const { text } = await scrape(tenantViewer);
    const typed = new Set<string>();
    let samples = 0;
    for (const line of text.split('\n')) {
      if (line === '') continue;
      const type = /^# TYPE (\S+) (counter|gauge|histogram|summary)$/.exec(line);
      if (type) {
        typed.add(type[1]!);
        continue;
      }
      if (line.startsWith('# HELP ')) continue;
      const sample = SAMPLE.exec(line);
      expect(sample, line).not.toBeNull();
      const family = sample![1]!.replace(/_(bucket|sum|count)$/, '');
      expect(typed.has(family) || typed.has(sample![1]!), line).toBe(true);
      expect(full, line).toContain(line);
      samples += 1;
    }
    expect(samples).toBeGreaterThan(0);
  });

  it('still refuses an inference token (403), no token or an unknown one (401), and a wrong scrape token (401)', async () => {
    expect((await scrape(rootInference)).status).toBe(403);
    expect((await scrape()).status).toBe(401);
    expect((await scrape('lnx_not-a-token')).status).toBe(401);
    expect((await scrape(`${SCRAPE_TOKEN}x`)).status).toBe(401);
  });
});
