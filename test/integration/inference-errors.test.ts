import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { eq, inArray } from 'drizzle-orm';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { seedDemoDeployment, startSimNode, stopSimNodes, type SimNode } from '../../functions/hosts/dev/fleet.js';
import { applyDeployment, type DeploymentInput } from '../../functions/services/deployments.js';
import { createApiToken, ensureWorkspace } from '../../functions/services/api-tokens.js';
import { deployments, workloads } from '../../functions/store/schema/index.js';
import type { MachineView } from '../../shared/contracts/machine.js';
import { describePg } from '../helpers/pg.js';
import { startStartingMachine } from '../helpers/machine.js';
import { startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';

/**
 * Every refusal and failure of the `/v1` surface, over raw HTTP: each answer is OpenAI's error envelope with
 * the right status, type, code and param, and none leaves state behind (live workloads, admission counts,
 * runtime slots), so the next request is served normally.
 */

const CHAT = '/v1/chat/completions';
const hello = (model: string, extra: Record<string, unknown> = {}) => ({
  model,
  messages: [{ role: 'user', content: 'hello there' }],
  max_tokens: 4,
  ...extra,
});

interface Envelope {
  error: { message: string; type: string; code: string | null; param: string | null };
}

/** Asserts the exact OpenAI envelope and returns it. */
async function expectEnvelope(response: Response, status: number, expected: { type: string; code: string | null; param?: string | null }): Promise<Envelope> {
  const text = await response.text();
  expect(response.status, text).toBe(status);
  expect(response.headers.get('content-type')).toMatch(/^application\/json/);
  const body = JSON.parse(text) as Envelope;
  expect(Object.keys(body)).toEqual(['error']);
  expect(Object.keys(body.error).sort()).toEqual(['code', 'message', 'param', 'type']);
  expect(typeof body.error.message).toBe('string');
  expect(body.error.message.length).toBeGreaterThan(0);
  expect(body.error).toMatchObject({ type: expected.type, code: expected.code, param: expected.param ?? null });
  return body;
}

function simulated(name: string, runtime: { failureRate?: number; tokensPerSecond?: number } = {}): DeploymentInput['runtime'] {
  return {
    kind: 'simulated',
    model: name,
    ttftMs: 20,
    tokensPerSecond: runtime.tokensPerSecond ?? 200,
    loadMs: 100,
    memoryMiB: 64,
    failureRate: runtime.failureRate ?? 0,
  };
}

async function deploy(plane: TestPlane, name: string, opts: Partial<DeploymentInput> & { failureRate?: number } = {}) {
  const { failureRate, ...rest } = opts;
  return await applyDeployment({
    ctx: plane.systemCtx,
    input: {
      workspaceId: plane.workspaceId,
      name,
      model: name,
      runtime: simulated(name, { failureRate }),
      artifact: null,
      restartPolicy: { mode: 'on-failure', maxRestarts: 5, backoffMs: 500 },
      replicas: 1,
      selector: { sim: 'true' },
      gpus: 0,
      memoryMiB: 64,
      ...rest,
    },
  });
}

/** Waits until routing sees a replica of `name` starting (placed on the holder machine, reported starting). */
async function waitForStarting(plane: TestPlane, name: string) {
  await waitFor(
    async () => {
      await plane.ports.dataPlane.routing.refresh();
      return plane.ports.dataPlane.routing.resolve(plane.workspaceId, name)?.startingReplicas === 1;
    },
    { timeoutMs: 15_000, what: `${name} starting` },
  );
}

/** Sums a Prometheus counter over the series whose labels include `deployment="<name>"`. */
async function counter(plane: TestPlane, metric: string, deployment: string): Promise<number> {
  const text = await (await plane.admin('/metrics')).text();
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${metric}{`) || !line.includes(`deployment="${deployment}"`)) continue;
    sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

/** Nothing an ended request holds may survive it: live workloads, admission counts, replica slots and queues. */
async function expectNoStuckState(plane: TestPlane) {
  const relay = plane.ports.dataPlane;
  // Admission's per-deployment in-flight counts are private; read them here to prove every `enter` was left.
  const inFlight = (relay.admission as unknown as { inFlight: Map<string, number> }).inFlight;
  await waitFor(
    async () => {
      const busy = relay.routing
        .list(plane.workspaceId)
        .flatMap((route) => route.replicas.map((r) => relay.admission.load(r.assignmentId)))
        .filter((load) => load.active > 0 || load.queued > 0);
      return relay.live.size === 0 && inFlight.size === 0 && busy.length === 0;
    },
    { timeoutMs: 2_000, intervalMs: 20, what: 'no live workload, no admission count, no busy replica' },
  );
  expect(relay.live.size).toBe(0);
  expect(inFlight.size).toBe(0);
}

/**
 * The refusals that happen before anything is dispatched. They need no node; where a `sim-chat` runtime
 * exists, `simChatRequests` reads its request count to prove that none of them reached it.
 */
function refusals(ctx: { plane: () => TestPlane; simChatRequests: () => Promise<number | null> }) {
  const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${ctx.plane().url}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ctx.plane().adminToken}`, 'content-type': 'application/json', ...headers },
      body: typeof body === 'string' ? body : JSON.stringify(body),
    });

  let requestsBefore: number | null = null;
  beforeEach(async () => {
    requestsBefore = await ctx.simChatRequests();
  });
  afterEach(async () => {
    // The refused request never reached the runtime.
    if (requestsBefore !== null) expect(await ctx.simChatRequests()).toBe(requestsBefore);
  });

  it('malformed JSON: 400 invalid_json', async () => {
    await expectEnvelope(await post(CHAT, '{"model": "sim-chat", "messages": ['), 400, { type: 'invalid_request_error', code: 'invalid_json' });
    await expectEnvelope(await post('/v1/embeddings', ''), 400, { type: 'invalid_request_error', code: 'invalid_json' });
  });

  it('unknown model: 404 model_not_found naming the model param', async () => {
    const body = await expectEnvelope(await post(CHAT, hello('no-such-model')), 404, { type: 'not_found_error', code: 'model_not_found', param: 'model' });
    expect(body.error.message).toContain('no-such-model');
    await expectEnvelope(await post('/v1/embeddings', { model: 'no-such-model', input: 'x' }), 404, {
      type: 'not_found_error',
      code: 'model_not_found',
      param: 'model',
    });
  });

  it('missing token: 401', async () => {
    const response = await fetch(`${ctx.plane().url}${CHAT}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(hello('sim-chat')),
    });
    await expectEnvelope(response, 401, { type: 'authentication_error', code: 'missing_api_key' });
    const models = await fetch(`${ctx.plane().url}/v1/models`);
    await expectEnvelope(models, 401, { type: 'authentication_error', code: 'missing_api_key' });
  });

  it('invalid token: 401', async () => {
    await expectEnvelope(await post(CHAT, hello('sim-chat'), { authorization: 'Bearer lnx_definitely-not-issued' }), 401, {
      type: 'authentication_error',
      code: 'invalid_api_key',
    });
    await expectEnvelope(await post(CHAT, hello('sim-chat'), { authorization: 'Basic dXNlcjpwYXNz' }), 401, {
      type: 'authentication_error',
      code: 'missing_api_key',
    });
  });

  it("another workspace's token cannot see this workspace's deployment: 404 model_not_found", async () => {
    const plane = ctx.plane();
    const workspaceId = await ensureWorkspace({ ctx: plane.systemCtx, input: { name: 'someone-else' } });
    expect(workspaceId).not.toBe(plane.workspaceId);
    const { token } = await createApiToken({ ctx: plane.systemCtx, input: { workspaceId, name: 'outsider', role: 'inference' } });
    await expectEnvelope(await post(CHAT, hello('sim-chat'), { authorization: `Bearer ${token}` }), 404, {
      type: 'not_found_error',
      code: 'model_not_found',
      param: 'model',
    });
    const models = await fetch(`${plane.url}/v1/models`, { headers: { authorization: `Bearer ${token}` } });
    expect(models.status).toBe(200);
    expect(((await models.json()) as { data: Array<{ id: string }> }).data.map((m) => m.id)).not.toContain('sim-chat');
  });

  it('oversized body (> 4 MiB): 413', async () => {
    const big = JSON.stringify(hello('sim-chat', { messages: [{ role: 'user', content: 'x'.repeat(4 * 1024 * 1024 + 16) }] }));
    await expectEnvelope(await post(CHAT, big), 413, { type: 'invalid_request_error', code: 'request_too_large' });
  });

  it('invalid parameters: 400 naming the param', async () => {
    const cases: Array<[string, unknown, string]> = [
      [CHAT, hello('sim-chat', { max_tokens: -1 }), 'max_tokens'],
      [CHAT, { model: 'sim-chat', max_tokens: 4 }, 'messages'],
      [CHAT, hello('sim-chat', { temperature: 5 }), 'temperature'],
      [CHAT, hello('sim-chat', { messages: [{ role: 'wizard', content: 'hi' }] }), 'messages.0.role'],
      ['/v1/completions', { model: 'sim-chat' }, 'prompt'],
      ['/v1/embeddings', { model: 'sim-chat', input: 'x', encoding_format: 'utf8' }, 'encoding_format'],
    ];
    for (const [path, body, param] of cases) {
      await expectEnvelope(await post(path, body), 400, { type: 'invalid_request_error', code: 'invalid_value', param });
    }
  });

  it('a deadline already past: 400 deadline_exceeded; an unparseable one: 400 invalid_deadline', async () => {
    const past = [new Date(Date.now() - 60_000).toISOString(), String(Date.now() - 1_000)];
    for (const deadline of past) {
      await expectEnvelope(await post(CHAT, hello('sim-chat'), { 'x-lunanexa-deadline': deadline }), 400, {
        type: 'invalid_request_error',
        code: 'deadline_exceeded',
      });
    }
    for (const deadline of ['tomorrow-ish', '12:00']) {
      await expectEnvelope(await post(CHAT, hello('sim-chat'), { 'x-lunanexa-deadline': deadline }), 400, {
        type: 'invalid_request_error',
        code: 'invalid_deadline',
      });
    }
  });

  it('an absurd deadline (past 2^53, not an integer, out of the Date range, far past the maximum): 400 invalid_deadline', async () => {
    const maxMs = ctx.plane().ports.config.maxDeadlineMs;
    const absurd = [
      '99999999999999999999',
      String(2 ** 53 + 2),
      '1e21',
      '12.5',
      '-1',
      '+275760-09-13T00:00:00.000Z',
      String(Date.now() + 26 * maxMs),
      new Date(Date.now() + 26 * maxMs).toISOString(),
      `${Date.now()}${'0'.repeat(300)}`,
    ];
    for (const deadline of absurd) {
      const body = await expectEnvelope(await post(CHAT, hello('sim-chat'), { 'x-lunanexa-deadline': deadline }), 400, {
        type: 'invalid_request_error',
        code: 'invalid_deadline',
      });
      expect(body.error.message).toContain(String(maxMs / 1000));
    }
    // The body's timeout is bounded by its schema (seconds, at most the maximum).
    await expectEnvelope(await post(CHAT, hello('sim-chat', { timeout: 1e300 })), 400, {
      type: 'invalid_request_error',
      code: 'invalid_value',
      param: 'timeout',
    });
  });

  it('a deployment scaled to zero: 503 no_replica_available at once, with Retry-After', async () => {
    const response = await post(CHAT, hello('sim-nowhere'));
    expect(response.headers.get('retry-after')).toBe('1');
    await expectEnvelope(response, 503, { type: 'server_error', code: 'no_replica_available' });
    const again = await post(CHAT, hello('sim-nowhere', { stream: true }));
    expect(again.headers.get('retry-after')).toBe('1');
    await expectEnvelope(again, 503, { type: 'server_error', code: 'no_replica_available' });
  });

  it('a deployment no machine can take: 503 no_replica_available at once (nothing is starting to wait for)', async () => {
    const started = Date.now();
    const response = await post(CHAT, hello('sim-pending'));
    expect(Date.now() - started).toBeLessThan(1_000);
    await expectEnvelope(response, 503, { type: 'server_error', code: 'no_replica_available' });
  });

  it('a deployment whose replica is starting holds the request; its deadline ends it with 504 deadline_exceeded', async () => {
    for (const stream of [false, true]) {
      const deadline = Date.now() + 700;
      const response = await post(CHAT, hello('sim-loading', { stream }), { 'x-lunanexa-deadline': String(deadline) });
      // Held to the deadline, not refused at once.
      expect(Date.now()).toBeGreaterThanOrEqual(deadline - 50);
      await expectEnvelope(response, 504, { type: 'timeout_error', code: 'deadline_exceeded' });
    }
  });

  it('a deployment deleted while a request waits for its replica: 404 model_not_found, promptly', async () => {
    const plane = ctx.plane();
    const { id } = await deploy(plane, 'sim-doomed', { selector: { pool: 'held' } });
    await waitFor(
      async () => {
        await plane.ports.dataPlane.routing.refresh();
        return plane.ports.dataPlane.routing.resolve(plane.workspaceId, 'sim-doomed')?.startingReplicas === 1;
      },
      { timeoutMs: 10_000, what: 'sim-doomed starting' },
    );
    const answer = post(CHAT, hello('sim-doomed'));
    await waitFor(async () => plane.ports.dataPlane.live.size === 1, { timeoutMs: 5_000, intervalMs: 10, what: 'the request held' });
    await plane.systemCtx.db.update(deployments).set({ deletedAt: new Date() }).where(eq(deployments.id, id));
    const deletedAt = Date.now();
    plane.ports.dataPlane.routing.invalidate();
    const response = await answer;
    expect(Date.now() - deletedAt).toBeLessThan(2_000);
    await expectEnvelope(response, 404, { type: 'not_found_error', code: 'model_not_found', param: 'model' });
  });
}

describe('/v1 errors on PGlite, with a fleet', () => {
  let plane: TestPlane;
  let holder: { stop(): Promise<void> } | undefined;
  let nodes: SimNode[] = [];

  const machines = async (): Promise<MachineView[]> => ((await (await plane.admin('/api/v1/machines')).json()) as { data: MachineView[] }).data;
  /** Base URLs of the runtimes of a deployment, from the agents' own runtime records. */
  // The token each runtime answers only to (the agent's, in the same record), by base URL.
  const runtimeTokens = new Map<string, string>();
  const runtimeUrls = async (deployment: string): Promise<string[]> => {
    const urls: string[] = [];
    for (const machine of await machines()) {
      const node = nodes.find((n) => n.name === machine.name)!;
      for (const runtime of machine.runtimes.filter((r) => r.deploymentName === deployment)) {
        const record = JSON.parse(await readFile(join(node.stateDir, 'runtimes', `${runtime.assignmentId}.json`), 'utf8')) as { port: number; token: string };
        urls.push(`http://127.0.0.1:${record.port}`);
        runtimeTokens.set(`http://127.0.0.1:${record.port}`, record.token);
      }
    }
    return urls;
  };
  const stats = async (url: string) =>
    (await (await fetch(`${url}/sim/stats`, { headers: { authorization: `Bearer ${runtimeTokens.get(url)}` } })).json()) as {
      requests: number;
      failed: number;
      completed: number;
      active: number;
    };
  const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${plane.url}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${plane.adminToken}`, 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
    });

  const replicasWanted: Record<string, number> = { 'sim-chat': 1, 'sim-faulty': 2, 'sim-capped': 1, 'sim-serial': 1, 'sim-shared': 1 };

  beforeAll(async () => {
    plane = await startTestPlane({ store: 'pglite' });
    await seedDemoDeployment(plane, 1, { loadMs: 100 });
    await deploy(plane, 'sim-faulty', { replicas: 2, failureRate: 1 });
    await deploy(plane, 'sim-capped', { queueCapacity: 1 });
    await deploy(plane, 'sim-shared', { queueCapacity: 4 });
    await deploy(plane, 'sim-serial', { maxConcurrency: 1 });
    await deploy(plane, 'sim-nowhere', { replicas: 0 });
    await deploy(plane, 'sim-pending', { selector: { pool: 'none-such' } });
    holder = await startStartingMachine(plane, 'holder', { pool: 'held' });
    await deploy(plane, 'sim-loading', { selector: { pool: 'held' } });
    nodes = await Promise.all(['err-1', 'err-2'].map((name) => startSimNode(plane, name, join(plane.dataDir, 'nodes'))));
    // Routable in the routing snapshot the requests read, not only in the machines view.
    await waitFor(
      async () => {
        await plane.ports.dataPlane.routing.refresh();
        return Object.entries(replicasWanted).every(([name, n]) => plane.ports.dataPlane.routing.resolve(plane.workspaceId, name)?.replicas.length === n);
      },
      { timeoutMs: 50_000, intervalMs: 200, what: 'every deployment routable' },
    ).catch(async (error: unknown) => {
      const logs = await Promise.all(nodes.map(async (n) => `${n.name}: ${(await readFile(n.logFile, 'utf8').catch(() => '')).slice(-2_000)}`));
      throw new Error(`${String(error)}\nmachines: ${JSON.stringify(await machines())}\n${logs.join('\n')}`);
    });
    for (const name of ['sim-nowhere', 'sim-pending', 'sim-loading'])
      expect(plane.ports.dataPlane.routing.resolve(plane.workspaceId, name)?.replicas).toEqual([]);
    await waitForStarting(plane, 'sim-loading');
  }, 90_000);

  afterEach(async () => {
    await expectNoStuckState(plane);
    // And the plane still serves a normal request.
    const response = await post(CHAT, hello('sim-chat'));
    expect(response.status, await response.clone().text()).toBe(200);
    expect(((await response.json()) as { choices: Array<{ message: { content: string } }> }).choices[0]!.message.content).toBe('tok0 tok1 tok2 tok3 ');
    await expectNoStuckState(plane);
  });

  afterAll(async () => {
    await holder?.stop();
    await stopSimNodes(nodes);
    await plane?.stop();
  });

  describe('refusals before dispatch', () => {
    refusals({
      plane: () => plane,
      simChatRequests: async () => (await stats((await runtimeUrls('sim-chat'))[0]!)).requests,
    });
  });

  it('a deadline past the maximum is clamped to it, and recorded so', async () => {
    const maxMs = plane.ports.config.maxDeadlineMs;
    for (const deadline of [String(Date.now() + 2 * maxMs), new Date(Date.now() + 3 * maxMs).toISOString()]) {
      const sentAt = Date.now();
      const response = await post(CHAT, hello('sim-chat'), { 'x-lunanexa-deadline': deadline });
      expect(response.status, await response.clone().text()).toBe(200);
      const id = response.headers.get('x-lunanexa-workload-id')!;
      await plane.ports.dataPlane.workloads.flush();
      const [row] = await plane.ports.store.db.select().from(workloads).where(eq(workloads.id, id));
      expect(row!.deadline.getTime()).toBeLessThanOrEqual(Date.now() + maxMs);
      expect(row!.deadline.getTime()).toBeGreaterThanOrEqual(sentAt + maxMs - 1_000);
    }
  });

  it('absurd deadlines amid concurrent load: every ordinary request succeeds and every ordinary workload row is written', async () => {
    const absurd = ['99999999999999999999', String(2 ** 53 + 2), String(Date.now() + 1e13), '1e21'];
    const sent: Array<{ ordinary: boolean; response: Promise<Response> }> = [];
    for (let i = 0; i < 19; i += 1) {
      sent.push({ ordinary: true, response: post(CHAT, hello('sim-chat', { stream: i % 2 === 0, max_tokens: 8 })) });
      const deadline = absurd[i % absurd.length]!;
      sent.push({ ordinary: false, response: post(CHAT, hello('sim-chat', { stream: i % 3 === 0 }), { 'x-lunanexa-deadline': deadline }) });
    }
    const ids: string[] = [];
    const failures: string[] = [];
    for (const { ordinary, response: pending } of sent) {
      const response = await pending;
      const text = await response.text();
      if (!ordinary) {
        if (response.status !== 400) failures.push(`absurd deadline answered ${response.status}`);
        continue;
      }
      if (response.status !== 200 || text.includes('"error"') || (text.includes('data:') && !text.trimEnd().endsWith('data: [DONE]')))
        failures.push(`ordinary: ${response.status} ${text.slice(-200)}`);
      ids.push(response.headers.get('x-lunanexa-workload-id')!);
    }
    expect(failures).toEqual([]);
    await plane.ports.dataPlane.workloads.flush();
    const rows = await plane.ports.store.db.select().from(workloads).where(inArray(workloads.id, ids));
    expect(rows.map((r) => r.state).sort()).toEqual(ids.map(() => 'succeeded'));
    // No node dropped its stream over it: both are still attached.
    const view = ((await (await plane.admin('/api/v1/machines')).json()) as { data: MachineView[] }).data.filter((m) => m.name.startsWith('err-'));
    expect(view.map((m) => m.streamAttached)).toEqual([true, true]);
  });

  it('a runtime failing mid-stream: 200, then an explicit error event and no [DONE]', async () => {
    const response = await post(CHAT, hello('sim-faulty', { stream: true, max_tokens: 20 }));
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const text = await response.text();
    const events = text
      .split('\n\n')
      .filter((block) => block.startsWith('data: '))
      .map((block) => block.slice('data: '.length));
    expect(events.length).toBeGreaterThanOrEqual(2);
    expect(events).not.toContain('[DONE]');
    // Some generation reached the client before the failure: exactly the case that must never look complete.
    expect(events.slice(0, -1).some((data) => (JSON.parse(data) as { object?: string }).object === 'chat.completion.chunk')).toBe(true);
    const last = JSON.parse(events[events.length - 1]!) as Envelope;
    expect(Object.keys(last)).toEqual(['error']);
    expect(last.error).toMatchObject({ type: 'server_error', code: expect.any(String), param: null });
    expect(last.error.message.length).toBeGreaterThan(0);
  });

  it('a runtime answering 500 is retried on the other replica, then 502 with the envelope', async () => {
    const urls = await runtimeUrls('sim-faulty');
    expect(urls).toHaveLength(2);
    const failedBefore = await Promise.all(urls.map(async (u) => (await stats(u)).failed));
    const retriesBefore = await counter(plane, 'lunanexa_retries_total', 'sim-faulty');
    const failuresBefore = await counter(plane, 'lunanexa_runtime_failures_total', 'sim-faulty');

    const response = await post(CHAT, hello('sim-faulty'));
    await expectEnvelope(response, 502, { type: 'server_error', code: 'runtime_error' });

    // Both replicas were tried, once each.
    const failedAfter = await Promise.all(urls.map(async (u) => (await stats(u)).failed));
    expect(failedAfter).toEqual(failedBefore.map((n) => n + 1));
    expect(await counter(plane, 'lunanexa_retries_total', 'sim-faulty')).toBeGreaterThanOrEqual(retriesBefore + 1);
    expect(await counter(plane, 'lunanexa_runtime_failures_total', 'sim-faulty')).toBe(failuresBefore + 2);
  });

  it('admission: over the queue capacity a request gets 429 with Retry-After; once the first ends, the next is served', async () => {
    // 1,000 tokens at 200 tokens/s: the first request holds the only admission slot for about 5 s, long enough for
    // the two refused requests below on a loaded machine.
    const first = await post(CHAT, hello('sim-capped', { stream: true, max_tokens: 1_000 }));
    expect(first.status).toBe(200);
    const rejectedBefore = await counter(plane, 'lunanexa_admission_rejected_total', 'sim-capped');

    const second = await post(CHAT, hello('sim-capped'));
    expect(second.headers.get('retry-after')).toBe('1');
    await expectEnvelope(second, 429, { type: 'rate_limit_error', code: 'capacity_exceeded' });
    const secondStream = await post(CHAT, hello('sim-capped', { stream: true }));
    expect(secondStream.headers.get('retry-after')).toBe('1');
    await expectEnvelope(secondStream, 429, { type: 'rate_limit_error', code: 'capacity_exceeded' });
    expect(await counter(plane, 'lunanexa_admission_rejected_total', 'sim-capped')).toBe(rejectedBefore + 2);

    const text = await first.text();
    expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
    const third = await post(CHAT, hello('sim-capped'));
    expect(third.status).toBe(200);
    expect(((await third.json()) as { object: string }).object).toBe('chat.completion');
  });

  it('admission: one token holds at most its share of a queue (half): past it 429 with Retry-After, while another token gets in', async () => {
    const { token: other } = await createApiToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name: 'share-other', role: 'inference' } });
    const held = new AbortController();
    const long = () =>
      fetch(`${plane.url}${CHAT}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${plane.adminToken}`, 'content-type': 'application/json' },
        body: JSON.stringify(hello('sim-shared', { stream: true, max_tokens: 1_000 })),
        signal: held.signal,
      });
    try {
      // Queue capacity 4: the admin token's share is 2.
      const mine = [await long(), await long()];
      for (const response of mine) expect(response.status).toBe(200);
      const third = await post(CHAT, hello('sim-shared'));
      expect(third.headers.get('retry-after')).toBe('1');
      const envelope = await expectEnvelope(third, 429, { type: 'rate_limit_error', code: 'token_concurrency_exceeded' });
      expect(envelope.error.message).toMatch(/sim-shared/);
      // The deployment itself still has room: another token is served.
      const theirs = await fetch(`${plane.url}${CHAT}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${other}`, 'content-type': 'application/json' },
        body: JSON.stringify(hello('sim-shared')),
      });
      expect(theirs.status, await theirs.clone().text()).toBe(200);
      expect(((await theirs.json()) as { object: string }).object).toBe('chat.completion');
    } finally {
      held.abort();
    }
  });

  it('runtime concurrency 1: two concurrent requests both succeed, the second reports its queue time', async () => {
    // 60 tokens at 200 tokens/s: each takes about 300 ms on the runtime.
    const started = performance.now();
    const responses = await Promise.all([post(CHAT, hello('sim-serial', { max_tokens: 60 })), post(CHAT, hello('sim-serial', { max_tokens: 60 }))]);
    const elapsed = performance.now() - started;
    for (const response of responses) {
      expect(response.status).toBe(200);
      expect(((await response.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens).toBe(60);
    }
    const timings = responses.map((response) => {
      const header = response.headers.get('server-timing') ?? '';
      const match = /queue;dur=([\d.]+),\s*accel;dur=([\d.]+)/.exec(header);
      expect(match, header).not.toBeNull();
      return { queue: Number(match![1]), accel: Number(match![2]) };
    });
    const [fast, slow] = [...timings].sort((a, b) => a.queue - b.queue);
    expect(fast!.queue).toBe(0);
    // The second waited for the whole of the first: most of its ~300 ms.
    expect(slow!.queue).toBeGreaterThan(150);
    expect(slow!.queue).toBeLessThan(elapsed);
    // Serialised, not parallel: together they took about twice one request.
    expect(elapsed).toBeGreaterThan(500);
  });
});

describePg('/v1 refusals on PostgreSQL (no fleet)', () => {
  let plane: TestPlane;
  let holder: { stop(): Promise<void> } | undefined;
  beforeAll(async () => {
    plane = await startTestPlane({ store: 'pg' });
    await seedDemoDeployment(plane, 1, { loadMs: 100 });
    await deploy(plane, 'sim-nowhere', { replicas: 0 });
    await deploy(plane, 'sim-pending', { selector: { pool: 'none-such' } });
    holder = await startStartingMachine(plane, 'holder', { pool: 'held' });
    await deploy(plane, 'sim-loading', { selector: { pool: 'held' } });
    await waitFor(async () => {
      await plane.ports.dataPlane.routing.refresh();
      return ['sim-nowhere', 'sim-pending'].every((name) => plane.ports.dataPlane.routing.resolve(plane.workspaceId, name) !== undefined);
    });
    await waitForStarting(plane, 'sim-loading');
  });
  afterEach(async () => {
    await expectNoStuckState(plane);
  });
  afterAll(async () => {
    await holder?.stop();
    await plane?.stop();
  });
  refusals({ plane: () => plane, simChatRequests: async () => null });
});

describe('/v1 when the store cannot answer', () => {
  let plane: TestPlane;
  beforeAll(async () => {
    plane = await startTestPlane({ store: 'pglite' });
  });
  afterAll(async () => {
    await plane?.stop().catch(() => {});
  });

  it('answers a token it cannot look up with 503 and Retry-After (the store is away), not a 401 that blames the client', async () => {
    await plane.ports.store.close();
    const response = await fetch(`${plane.url}/v1/models`, { headers: { authorization: 'Bearer lnx_never_seen_before' } });
    expect(response.status).toBe(503);
    expect(response.headers.get('retry-after')).toBe('1');
    expect(((await response.json()) as { error: { type: string; code: string } }).error).toMatchObject({ type: 'server_error', code: 'service_unavailable' });
    // The management surface says the same in its own envelope.
    const api = await fetch(`${plane.url}/api/v1/machines`, { headers: { authorization: 'Bearer lnx_never_seen_before' } });
    expect(api.status).toBe(503);
    expect(api.headers.get('retry-after')).toBe('1');
    expect(((await api.json()) as { error: { code: string } }).error.code).toBe('store_unavailable');
  });
});
