import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DeploymentServing } from '@lunanexa/sdk';
import { and, eq, isNull } from 'drizzle-orm';
import { assignments, auditEvents, deployments, jobs, machines, swarms } from '../../functions/store/schema/index.js';
import { createApiToken, ensureWorkspace } from '../../functions/services/api-tokens.js';
import { ErrorEnvelope } from '../../shared/contracts/common.js';
import type { DeploymentDetail } from '../../shared/contracts/deployment.js';
import { SwarmDown, SwarmView } from '../../shared/contracts/swarm.js';
import { JobView } from '../../shared/batch/job.js';
import { newId } from '../../shared/ids.js';
import { enrollTestMachine, heartbeatBody, runtimeReport, type TestMachine } from '../helpers/machine.js';
import { describePg } from '../helpers/pg.js';
import { startTestPlane, waitFor, type StoreKind, type TestPlane } from '../helpers/plane.js';

/**
 * Swarms over the management API (docs/jobs.md, "Swarms"): up creates and reconciles the swarm's deployment through
 * the deployments' own verb, its status is its deployment's as the fleet reports it (a machine driven over the real
 * agent protocol by the test), jobs submitted to it take its model and defaults, and down cancels its unfinished
 * jobs and retires its deployment. Bad input, weak tokens and other workspaces are refused and change nothing.
 */
function swarmSuite(store: StoreKind, publicUrl?: string) {
  let plane: TestPlane;
  let node: TestMachine;
  let viewer: string;
  let other: string;
  let seq = 0;
  const stream = new AbortController();

  const config = (extra: Record<string, unknown> = {}, jobDefaults: Record<string, unknown> = { concurrency: 4 }) => ({
    deployment: {
      model: 'alpha-model',
      runtime: { kind: 'simulated' as const, model: 'alpha-model', ttftMs: 20, tokensPerSecond: 200, loadMs: 100, memoryMiB: 64, failureRate: 0 },
      replicas: 1,
      selector: { site: 'lab' },
      memoryMiB: 1024,
      restartPolicy: { mode: 'on-failure' as const, maxRestarts: 2, backoffMs: 100 },
      ...extra,
    },
    jobs: jobDefaults,
  });
  const call = (method: string, path: string, body?: unknown, token = plane.adminToken) =>
    fetch(`${plane.url}/api/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
    });
  const up = async (name: string, body: unknown) => {
    const response = await call('PUT', `/swarms/${name}`, body);
    expect(response.status, await response.clone().text()).toBe(200);
    return SwarmView.parse(await response.json());
  };
  const swarm = async (name: string) => {
    const response = await call('GET', `/swarms/${name}`);
    expect(response.status, await response.clone().text()).toBe(200);
    return SwarmView.parse(await response.json());
  };
  const deployment = async (name: string) => {
    const response = await call('GET', `/deployments/${name}`);
    expect(response.status, await response.clone().text()).toBe(200);
    return (await response.json()) as DeploymentDetail;
  };
  const audited = async (action: string) =>
    await plane.systemCtx.db
      .select({ target: auditEvents.target, details: auditEvents.details })
      .from(auditEvents)
      .where(and(eq(auditEvents.workspaceId, plane.workspaceId), eq(auditEvents.action, action)))
      .orderBy(auditEvents.seq);
  /** The node reports every replica placed on it in `state`, at the generation it was last sent. */
  const report = async (state: 'ready' | 'failed') => {
    const db = plane.systemCtx.db;
    const placed = await db
      .select({ id: assignments.id, deploymentId: assignments.deploymentId })
      .from(assignments)
      .where(and(eq(assignments.machineId, node.machineId), isNull(assignments.removedAt)));
    const [row] = await db.select({ desiredGen: machines.desiredGen }).from(machines).where(eq(machines.id, node.machineId));
    const gen = row?.desiredGen ?? 0;
    const runtimes = placed.map((r) =>
      runtimeReport(r.id, r.deploymentId, { state, gen, ...(state === 'failed' ? { restarts: 2, message: 'exit code 1' } : {}) }),
    );
    const response = await node.request('POST', '/agent/v1/heartbeat', heartbeatBody(node, ++seq, { gen, runtimes }));
    expect(response.status, await response.clone().text()).toBe(200);
  };
  /** What a refusal must leave alone: the workspace's swarms, deployments, jobs and audit log. */
  const state = async () => {
    const db = plane.systemCtx.db;
    return JSON.stringify([
      await db.select().from(swarms).orderBy(swarms.id),
      await db.select().from(deployments).orderBy(deployments.id),
      await db.select({ id: jobs.id, state: jobs.state }).from(jobs).orderBy(jobs.id),
      // Refusals by role are audited (`denied`): what must not change is what succeeded.
      (await db.select({ id: auditEvents.id }).from(auditEvents).where(eq(auditEvents.outcome, 'succeeded'))).length,
    ]);
  };
  const upload = async (text: string) => {
    const form = new FormData();
    form.append('purpose', 'user_data');
    form.append('file', new Blob([text]), 'rows.jsonl');
    const response = await fetch(`${plane.url}/v1/files`, { method: 'POST', headers: { authorization: `Bearer ${plane.adminToken}` }, body: form });
    expect(response.status).toBe(200);
    return ((await response.json()) as { id: string }).id;
  };
  const expectRefused = async (response: Response, status: number, code?: string) => {
    const text = await response.text();
    expect(response.status, text).toBe(status);
    const envelope = ErrorEnvelope.parse(JSON.parse(text));
    if (code) expect(envelope.error.code, text).toBe(code);
  };

  beforeAll(async () => {
    // The node heartbeats when a test says so (slow liveness: it never goes stale between steps), and no job runner
    // starts: a swarm's jobs stay pending until its down cancels them.
    plane = await startTestPlane({
      store,
      config: { heartbeatIntervalMs: 20_000, machineLifetimeMs: 600_000, runtimeTtlMs: 600_000, jobsLocalRunners: 0, publicUrl },
    });
    node = await enrollTestMachine(plane, 'swarm-node', { site: 'lab' });
    expect((await node.request('POST', '/agent/v1/heartbeat', heartbeatBody(node, ++seq))).status).toBe(200);
    // The node holds its stream, as an agent does: a replica is routable only on a machine the plane can reach.
    const held = await fetch(`${plane.url}/agent/v1/stream`, {
      headers: { authorization: `Bearer ${await node.sign('GET', '/agent/v1/stream', '')}` },
      signal: stream.signal,
    });
    expect(held.status).toBe(200);
    // Read to its end (the plane's keep-alives), so that the stream is never dropped as a response nobody holds.
    const reader = held.body!.getReader();
    void (async () => {
      while (!(await reader.read()).done) {
        // keep-alives only
      }
    })().catch(() => {});
    viewer = (await createApiToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name: 'viewer', role: 'viewer' } })).token;
    const otherWorkspace = await ensureWorkspace({ ctx: plane.systemCtx, input: { name: 'swarms-other' } });
    other = (await createApiToken({ ctx: plane.systemCtx, input: { workspaceId: otherWorkspace, name: 'other admin', role: 'admin' } })).token;
  });
  afterAll(async () => {
    stream.abort();
    await plane?.stop();
  });

  it('up creates the swarm and its deployment, named after it, in one audited write', async () => {
    const view = await up('alpha', config());
    expect(view).toMatchObject({
      name: 'alpha',
      deployment: 'alpha',
      // What requests and its jobs' rows name: its deployment (which loads alpha-model).
      model: 'alpha',
      // The plane's public URL where it is told one; else the path, for the client to resolve.
      endpoint: publicUrl ? 'https://lunanexa.example/v1' : '/v1',
      status: 'creating',
      replicas: { desired: 1, ready: 0, starting: 1, failed: 0 },
      jobs: { total: 0, pending: 0 },
    });
    expect(view.id).toMatch(/^swm_/);
    expect(view.config).toMatchObject({ name: 'alpha', deployment: { model: 'alpha-model', replicas: 1 }, jobs: { concurrency: 4 } });
    const created = await deployment('alpha');
    expect(created).toMatchObject({ model: 'alpha-model', replicas: 1, generation: 1, selector: { site: 'lab' } });
    expect(created.status.replicas.map((r) => r.machineName)).toEqual(['swarm-node']);
    expect((await audited('swarm.up')).map((e) => [e.target, e.details])).toEqual([
      [view.id, { name: 'alpha', created: true, deployment: 'alpha', deploymentGeneration: 1 }],
    ]);
    expect((await audited('deployment.create')).map((e) => e.target)).toContain(created.id);
  });

  it('up again with the same config changes nothing; with another it reconciles the deployment, and undoes a change made around it', async () => {
    const before = await swarm('alpha');
    expect((await up('alpha', { name: 'alpha', ...config() })).updatedAt).toBe(before.updatedAt);
    expect((await deployment('alpha')).generation).toBe(1);
    expect(await audited('swarm.up')).toHaveLength(1);

    const changed = await up('alpha', config({ maxConcurrency: 8 }));
    expect(changed.config.deployment.maxConcurrency).toBe(8);
    expect(await deployment('alpha')).toMatchObject({ maxConcurrency: 8, generation: 2 });
    // Scaled through the deployments API behind the swarm's back: up puts it back as the swarm declares it.
    const scaled = await call('PUT', '/deployments/alpha', { ...config({ maxConcurrency: 8 }).deployment, replicas: 3 });
    expect(scaled.status).toBe(200);
    expect((await swarm('alpha')).replicas.desired).toBe(3);
    await up('alpha', config({ maxConcurrency: 8 }));
    expect(await deployment('alpha')).toMatchObject({ replicas: 1, generation: 4 });
    expect((await audited('swarm.up')).map((e) => (e.details as { deploymentGeneration: number }).deploymentGeneration)).toEqual([1, 2, 4]);
  });

  it("derives its status from its deployment's: ready, degraded, stopped, missing", async () => {
    const ready = await waitFor(
      async () => {
        // Reported as an agent does, every beat: what was placed since the last one included.
        await report('ready');
        const view = await swarm('alpha');
        return view.status === 'ready' ? view : null;
      },
      { timeoutMs: 10_000, what: 'the swarm to be ready' },
    );
    expect(ready.replicas).toEqual({ desired: 1, ready: 1, starting: 0, failed: 0 });
    expect(ready.reasons).toEqual([]);

    await report('failed');
    // Failed past its restarts: retired, and the machine marked, so that it cannot be placed again there.
    const degraded = await swarm('alpha');
    expect(degraded.status).toBe('degraded');
    expect(degraded.replicas).toMatchObject({ desired: 1, ready: 0 });
    expect(degraded.reasons.join('; ')).toContain('replica failed on swarm-node: exit code 1');

    expect((await up('alpha', config({ maxConcurrency: 8, replicas: 0 }))).status).toBe('stopped');
    // Its deployment deleted outside the swarm: missing, until up creates it again.
    expect((await call('DELETE', '/deployments/alpha')).status).toBe(200);
    expect(await swarm('alpha')).toMatchObject({ status: 'missing', model: 'alpha', replicas: { desired: 0, ready: 0 } });
    const again = await up('alpha', config({ maxConcurrency: 8 }));
    expect(again.status).not.toBe('missing');
    expect(again.replicas.desired).toBe(1);
    expect((await deployment('alpha')).generation).toBe(1);
  });

  it('lists the swarms by name, a page at a time', async () => {
    await up('beta', config({ replicas: 0, model: 'beta-model' }));
    await up('gamma', { ...config({ replicas: 0, name: 'gamma-serving', model: 'gamma-model' }) });
    expect((await deployment('gamma-serving')).model).toBe('gamma-model');
    const first = (await (await call('GET', '/swarms?limit=2')).json()) as { data: SwarmView[]; nextCursor: string | null };
    expect(first.data.map((s) => [s.name, s.deployment])).toEqual([
      ['alpha', 'alpha'],
      ['beta', 'beta'],
    ]);
    expect(first.data[1]!.status).toBe('stopped');
    expect(first.nextCursor).not.toBeNull();
    const second = (await (await call('GET', `/swarms?limit=2&cursor=${first.nextCursor}`)).json()) as { data: SwarmView[]; nextCursor: string | null };
    expect(second.data.map((s) => [s.name, s.deployment, s.model])).toEqual([['gamma', 'gamma-serving', 'gamma-serving']]);
    expect(second.nextCursor).toBeNull();
    await expectRefused(await call('GET', '/swarms?cursor=nope'), 400, 'invalid_cursor');
  });

  it('takes a job submitted to it as its own: its model, its defaults, counted in its view', async () => {
    const inputFileId = await upload('{"messages":[{"role":"user","content":"hi"}]}\n');
    const submit = async (body: Record<string, unknown>) => {
      const response = await call('POST', '/jobs', { inputFileId, ...body });
      expect(response.status, await response.clone().text()).toBe(201);
      return JobView.parse(await response.json());
    };
    const defaulted = await submit({ rows: { kind: 'chat' }, swarm: 'alpha' });
    expect(defaulted.spec).toMatchObject({ kind: 'rows', rows: { model: 'alpha' }, backend: 'local', concurrency: 4, maxAttempts: 5 });
    const own = await submit({ rows: { kind: 'chat', model: 'beta-model' }, swarm: 'alpha', concurrency: 2, maxAttempts: 1 });
    expect(own.spec).toMatchObject({ rows: { model: 'beta-model' }, concurrency: 2, maxAttempts: 1 });
    const loose = await submit({ rows: { kind: 'chat', model: 'alpha-model' } });
    const rows = await plane.systemCtx.db.select({ id: jobs.id, swarmId: jobs.swarmId }).from(jobs);
    const alpha = await swarm('alpha');
    expect(Object.fromEntries(rows.map((r) => [r.id, r.swarmId]))).toMatchObject({ [defaulted.id]: alpha.id, [own.id]: alpha.id, [loose.id]: null });
    expect(alpha.jobs).toMatchObject({ total: 2, pending: 2, running: 0 });
    expect((await swarm('beta')).jobs.total).toBe(0);

    const before = await state();
    await expectRefused(await call('POST', '/jobs', { inputFileId, rows: { kind: 'chat' } }), 400, 'validation_failed');
    await expectRefused(await call('POST', '/jobs', { inputFileId, rows: { kind: 'chat' }, swarm: 'nowhere' }), 404, 'not_found');
    await expectRefused(await call('POST', '/jobs', { inputFileId, rows: { kind: 'chat' }, swarm: 'Not A Name' }), 400, 'validation_failed');
    await expectRefused(await call('POST', '/jobs', { inputFileId, rows: { kind: 'chat' }, swarm: 'alpha', backend: 'cloud' }), 400, 'validation_failed');
    expect(await state()).toBe(before);
  });

  it('refuses bad input with a 4xx in the envelope, and changes nothing', async () => {
    const before = await state();
    const cases: Array<[string, unknown, number, string]> = [
      ['NOT_A_NAME', config(), 400, 'validation_failed'],
      ['delta', { name: 'other', ...config() }, 400, 'validation_failed'],
      ['delta', { jobs: {} }, 400, 'validation_failed'],
      ['delta', config({ rollout: { maxSurge: 0, maxUnavailable: 0 } }), 400, 'validation_failed'],
      ['delta', config({ name: 'Bad Name' }), 400, 'validation_failed'],
      ['delta', config({}, { concurrency: 1_000 }), 400, 'validation_failed'],
      ['delta', config({}, { backend: 'cloud' }), 400, 'validation_failed'],
      ['delta', config({ runtime: { kind: 'template', template: 'no-such-template' } }), 400, 'unknown_template'],
      ['delta', '{', 400, 'invalid_json'],
      ['delta', config({ model: 'm'.repeat(300_000) }), 413, 'payload_too_large'],
      // The deployment of another swarm, and another deployment for an existing swarm.
      ['delta', config({ name: 'beta' }), 409, 'conflict'],
      ['gamma', config({ name: 'gamma-other' }), 409, 'conflict'],
    ];
    for (const [name, body, status, code] of cases) await expectRefused(await call('PUT', `/swarms/${name}`, body), status, code);
    await expectRefused(await call('GET', '/swarms/delta'), 404, 'not_found');
    await expectRefused(await call('DELETE', '/swarms/delta'), 404, 'not_found');
    await expectRefused(await call('GET', '/swarms/NOT_A_NAME'), 400, 'validation_failed');
    await expectRefused(await call('GET', '/swarms?limit=0'), 400, 'validation_failed');
    expect(await state()).toBe(before);
  });

  it("answers another workspace's swarm with 404, and its own list holds only its own", async () => {
    const before = await state();
    await expectRefused(await call('GET', '/swarms/beta', undefined, other), 404, 'not_found');
    await expectRefused(await call('DELETE', '/swarms/beta', undefined, other), 404, 'not_found');
    await expectRefused(await call('POST', '/jobs', { inputFileId: newId('file'), rows: { kind: 'chat' }, swarm: 'beta' }, other), 404, 'not_found');
    expect(((await (await call('GET', '/swarms', undefined, other)).json()) as { data: unknown[] }).data).toEqual([]);
    expect(await state()).toBe(before);
  });

  it('lets a viewer read swarms but not bring them up or down', async () => {
    const before = await state();
    expect((await call('GET', '/swarms', undefined, viewer)).status).toBe(200);
    expect((await call('GET', '/swarms/beta', undefined, viewer)).status).toBe(200);
    await expectRefused(await call('PUT', '/swarms/beta', config(), viewer), 403, 'forbidden');
    await expectRefused(await call('PUT', '/swarms/delta', config(), viewer), 403, 'forbidden');
    await expectRefused(await call('DELETE', '/swarms/beta', undefined, viewer), 403, 'forbidden');
    const anonymous = await fetch(`${plane.url}/api/v1/swarms/beta`, { method: 'DELETE' });
    await expectRefused(anonymous, 401, 'unauthorized');
    expect(await state()).toBe(before);
  });

  it("the SDK's DeploymentServing creates, reads and deletes a deployment over the same API", async () => {
    const serving = new DeploymentServing('sdk-serving', config({ replicas: 0, model: 'sdk-model' }).deployment, { url: plane.url, token: plane.adminToken });
    expect(await serving.createOrUpdate()).toEqual({ name: 'sdk-serving', model: 'sdk-model', desired: 0, ready: 0, status: 'complete' });
    expect((await deployment('sdk-serving')).generation).toBe(1);
    expect((await serving.status()).model).toBe('sdk-model');
    expect(await serving.delete()).toBe(true);
    expect(await serving.delete()).toBe(false);
    await expect(serving.status()).rejects.toMatchObject({ status: 404, code: 'not_found' });
  });

  it('down cancels its unfinished jobs, retires its deployment and removes its record; a second down is 404', async () => {
    const alpha = await swarm('alpha');
    const pending = (await plane.systemCtx.db.select({ id: jobs.id }).from(jobs).where(eq(jobs.swarmId, alpha.id))).map((j) => j.id).sort();
    // A job that already ended is left as it is.
    const [ended] = await plane.systemCtx.db
      .insert(jobs)
      .values({
        id: newId('job'),
        workspaceId: plane.workspaceId,
        swarmId: alpha.id,
        state: 'completed',
        outcome: 'completed',
        spec: JobView.shape.spec.parse({ kind: 'rows', rows: { kind: 'chat', model: 'alpha-model' }, inputFileId: newId('file'), format: 'jsonl' }),
      })
      .returning({ id: jobs.id });
    expect((await swarm('alpha')).jobs).toMatchObject({ total: 3, pending: 2, completed: 1 });

    const response = await call('DELETE', '/swarms/alpha');
    expect(response.status, await response.clone().text()).toBe(200);
    const down = SwarmDown.parse(await response.json());
    expect(down).toEqual({ name: 'alpha', deleted: true, cancelledJobs: pending, deploymentDeleted: true });
    const after = await plane.systemCtx.db.select({ id: jobs.id, state: jobs.state, outcome: jobs.outcome }).from(jobs).where(eq(jobs.swarmId, alpha.id));
    for (const job of after) {
      if (job.id === ended!.id) expect(job).toMatchObject({ state: 'completed', outcome: 'completed' });
      else expect(job.outcome, job.id).toBe('cancelled');
    }
    await expectRefused(await call('GET', '/deployments/alpha'), 404, 'not_found');
    await expectRefused(await call('GET', '/swarms/alpha'), 404, 'not_found');
    await expectRefused(await call('DELETE', '/swarms/alpha'), 404, 'not_found');
    expect((await audited('swarm.down')).map((e) => [e.target, e.details])).toEqual([
      [alpha.id, { name: 'alpha', deployment: 'alpha', deploymentDeleted: true, cancelledJobs: 2 }],
    ]);
    expect((await audited('job.cancel')).map((e) => e.target).sort()).toEqual(pending);

    // A swarm whose deployment is gone already comes down all the same; up again is a new swarm, none of the old jobs.
    expect((await call('DELETE', '/deployments/beta')).status).toBe(200);
    expect(SwarmDown.parse(await (await call('DELETE', '/swarms/beta')).json())).toMatchObject({ deploymentDeleted: false, cancelledJobs: [] });
    const reborn = await up('alpha', config());
    expect(reborn.id).not.toBe(alpha.id);
    expect(reborn.jobs.total).toBe(0);
  });
}

describe('swarms (PGlite)', () => swarmSuite('pglite'));
describePg('swarms (PostgreSQL, LUNANEXA_PUBLIC_URL set)', () => swarmSuite('pg', 'https://lunanexa.example/'));
