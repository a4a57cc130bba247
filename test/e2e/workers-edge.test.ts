import { afterAll, beforeAll, expect, it } from 'vitest';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { and, eq, isNull } from 'drizzle-orm';
import OpenAI from 'openai';
import { Agent as UndiciAgent, fetch as undiciFetch } from 'undici';
import { Miniflare } from 'miniflare';
import { seedDemoDeployment, spawnAgent, waitForExit, writeSimPolicy } from '../../functions/hosts/dev/fleet.js';
import { assignments, workloads } from '../../functions/store/schema/index.js';
import { describePg } from '../helpers/pg.js';
import { startEdgeFixture, workerOptions, type EdgeFixture } from '../helpers/edge.js';
import { waitFor } from '../helpers/plane.js';

/** Fast protocol timings, so that reports and liveness move in a test's time. */
const TIMINGS = {
  LUNANEXA_HEARTBEAT_INTERVAL_MS: '500',
  LUNANEXA_MACHINE_LIFETIME_MS: '5000',
  LUNANEXA_RUNTIME_TTL_MS: '5000',
  LUNANEXA_RUNTIME_GRACE_MS: '1000',
  LUNANEXA_STREAM_KEEPALIVE_MS: '1000',
};

type ScheduledFetcher = { scheduled(opts: { cron?: string; scheduledTime?: Date }): Promise<{ outcome: string }> };

/**
 * The Workers edge end to end (docs/workers.md): the built Worker in workerd (Miniflare), one Durable Object per
 * machine holding its link, a real PostgreSQL through the Neon driver, and a real agent process dialling out.
 * Two Worker scripts share the objects: the agent's stream and uploads land on one, clients on the other, so
 * nothing can pass between them but through the machine's object (separate isolates; one workerd process, see
 * the last test for what that cannot show).
 */
describePg('the Workers edge with a Durable Object per machine link (Miniflare, real agent)', () => {
  let fixture: EdgeFixture;
  let mf: Miniflare;
  let clientMf: Miniflare;
  let registry: string | undefined;
  let agentUrl: string;
  let clientUrl: string;
  let root: string;
  let agent: ChildProcess | undefined;
  let machineId: string;

  const api = async (base: string, path: string, init: RequestInit = {}) =>
    await fetch(`${base}${path}`, { ...init, headers: { authorization: `Bearer ${fixture.adminToken}`, 'content-type': 'application/json', ...init.headers } });

  const applyConcurrency = async (maxConcurrency: number) => {
    const spec = (await (await api(clientUrl, '/api/v1/deployments/sim-chat')).json()) as Record<string, unknown>;
    expect((await api(clientUrl, '/api/v1/deployments/sim-chat', { method: 'PUT', body: JSON.stringify({ ...pick(spec), maxConcurrency }) })).status).toBe(200);
  };

  const tick = async () => {
    const worker = (await clientMf.getWorker()) as unknown as ScheduledFetcher;
    expect((await worker.scheduled({ cron: '*/1 * * * *', scheduledTime: new Date() })).outcome).toBe('ok');
  };

  beforeAll(async () => {
    fixture = await startEdgeFixture();
    const bindings = fixture.bindings(TIMINGS);
    // Two workerd processes, as two data centres would be: the agent's door holds the objects; the clients' door
    // (another Miniflare, another workerd) reaches them through Miniflare's dev registry, by script name.
    registry = await mkdtemp(join(tmpdir(), 'lnx-edge-registry-'));
    mf = new Miniflare({
      ...workerOptions(fixture, 'edge-agent', bindings),
      host: '127.0.0.1',
      port: 0,
      unsafeDevRegistryPath: registry,
      unsafeDevRegistryDurableObjectProxy: true,
    });
    agentUrl = (await mf.ready).toString().replace(/\/$/, '');
    clientMf = new Miniflare({
      ...workerOptions(fixture, 'edge-client', bindings),
      durableObjects: { MACHINE_LINKS: { className: 'MachineLink', scriptName: 'edge-agent' } },
      host: '127.0.0.1',
      port: 0,
      unsafeDevRegistryPath: registry,
    });
    clientUrl = (await clientMf.ready).toString().replace(/\/$/, '');
    root = await mkdtemp(join(tmpdir(), 'lnx-edge-nodes-'));

    const minted = await api(agentUrl, '/api/v1/enrollment-tokens', { method: 'POST', body: JSON.stringify({ name: 'edge-node', labels: { sim: 'true' } }) });
    expect(minted.status).toBe(201);
    const { token } = (await minted.json()) as { token: string };
    const stateDir = join(root, 'edge-node');
    const logFile = join(root, 'edge-node.log');
    const enroll = spawnAgent(['enroll', '--url', agentUrl, '--token', '-', '--name', 'edge-node', '--state-dir', stateDir], {
      logFile,
      env: { LUNANEXA_ENROLLMENT_TOKEN: token },
    });
    expect(await waitForExit(enroll, 60_000)).toBe(0);
    agent = spawnAgent(['run', '--state-dir', stateDir, '--policy', await writeSimPolicy(stateDir), '--stop-runtimes-on-exit'], { logFile });
    machineId = await waitFor(
      async () => {
        const { data } = (await (await api(clientUrl, '/api/v1/machines')).json()) as { data: { id: string; state: string }[] };
        return data.find((m) => m.state === 'ready')?.id;
      },
      { timeoutMs: 60_000, what: 'the agent to be ready through the Worker' },
    );
    await seedDemoDeployment(
      { systemCtx: fixture.ctx, workspaceId: fixture.workspaceId },
      1,
      { loadMs: 100, memoryMiB: 64, tokensPerSecond: 100 },
      { maxConcurrency: 4 },
    );
    // Placement runs on the cron trigger; its desired-state signal reaches the agent through the machine's object.
    await tick();
    await waitFor(
      async () => {
        const response = await api(clientUrl, '/v1/chat/completions', {
          method: 'POST',
          body: JSON.stringify({ model: 'sim-chat', messages: [{ role: 'user', content: 'ping' }], max_tokens: 2 }),
        });
        return response.status === 200;
      },
      { timeoutMs: 60_000, intervalMs: 500, what: 'sim-chat to answer through the Worker' },
    );
  }, 180_000);

  afterAll(async () => {
    if (agent && agent.exitCode === null) {
      agent.kill('SIGTERM');
      await waitForExit(agent).catch(() => agent!.kill('SIGKILL'));
    }
    await clientMf?.dispose();
    await mf?.dispose();
    if (registry) await rm(registry, { recursive: true, force: true });
    await fixture?.stop();
    if (root) await rm(root, { recursive: true, force: true });
  }, 60_000);

  it("streams a chat completion to the official openai client through the machine's object, and records the workload", async () => {
    const client = new OpenAI({ baseURL: `${clientUrl}/v1`, apiKey: fixture.adminToken, maxRetries: 0 });
    const statementsBefore = fixture.proxy.sqlRequests();
    const stream = await client.chat.completions.create({
      model: 'sim-chat',
      messages: [{ role: 'user', content: 'hello edge' }],
      max_tokens: 16,
      stream: true,
    });
    let text = '';
    let chunks = 0;
    for await (const chunk of stream) {
      chunks += 1;
      text += chunk.choices[0]?.delta?.content ?? '';
    }
    expect(chunks).toBeGreaterThan(2);
    expect(text.length).toBeGreaterThan(0);
    // The record was written before the request let its connections go (never behind a closed pool).
    await waitFor(
      async () => {
        const rows = await fixture.store.db.select({ state: workloads.state }).from(workloads);
        return rows.length > 0 && rows.every((row) => row.state !== 'running');
      },
      { timeoutMs: 10_000, what: 'every workload record to be finished' },
    );
    const rows = await fixture.store.db.select({ state: workloads.state }).from(workloads);
    expect(rows.filter((row) => row.state === 'succeeded').length).toBeGreaterThanOrEqual(2);
    // Written as single statements over Neon's SQL-over-HTTP endpoint, not on a connection of the request's own.
    expect(fixture.proxy.sqlRequests()).toBeGreaterThan(statementsBefore);
  });

  /** Starts a streamed completion of `maxTokens` through `base`; its workload id and a reader of its body. */
  const startStream = async (base: string, maxTokens: number) => {
    const response = await api(base, '/v1/chat/completions', {
      method: 'POST',
      body: JSON.stringify({ model: 'sim-chat', messages: [{ role: 'user', content: 'go on' }], max_tokens: maxTokens, stream: true }),
    });
    expect(response.status).toBe(200);
    return { workloadId: response.headers.get('x-lunanexa-workload-id')!, body: response.body!.getReader() };
  };
  const readToEnd = async (reader: ReadableStreamDefaultReader<Uint8Array>) => {
    let text = '';
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return text;
      text += new TextDecoder().decode(value);
    }
  };
  const workloadState = async (id: string) => (await fixture.store.db.select({ state: workloads.state }).from(workloads).where(eq(workloads.id, id)))[0]?.state;

  it('cancels through the cancel API on the other workerd a workload streaming through this one', async () => {
    const { workloadId, body } = await startStream(clientUrl, 2_000);
    expect(workloadId).toMatch(/^wkl_/);
    await waitFor(async () => (await workloadState(workloadId)) === 'running', { timeoutMs: 5_000, what: 'the workload record' });
    const cancel = await api(agentUrl, `/api/v1/workloads/${workloadId}/cancel`, { method: 'POST' });
    expect(cancel.status).toBe(202);
    const text = await readToEnd(body);
    expect(text).not.toContain('[DONE]');
    await waitFor(async () => (await workloadState(workloadId)) === 'cancelled', { timeoutMs: 10_000, what: 'the workload to be recorded cancelled' });
  });

  it("holds the replica to its concurrency across both workerd processes: the machine's object queues the second call", async () => {
    // maxConcurrency is 1 here: one streaming call from each process, the second waits for the first's slot.
    await applyConcurrency(1);
    const first = await startStream(clientUrl, 200);
    const secondAnswer = api(agentUrl, '/v1/chat/completions', {
      method: 'POST',
      body: JSON.stringify({ model: 'sim-chat', messages: [{ role: 'user', content: 'me too' }], max_tokens: 2, stream: false }),
    }).then(async (response) => ({ status: response.status, at: Date.now() }));
    const firstText = await readToEnd(first.body);
    const firstEnded = Date.now();
    expect(firstText).toContain('[DONE]');
    const second = await secondAnswer;
    expect(second.status).toBe(200);
    // Queued, not run beside it: the second answer came after the first stream ended.
    expect(second.at).toBeGreaterThanOrEqual(firstEnded);
    await applyConcurrency(4);
  });

  it("cancels through the API a call waiting in the machine's object for a slot: it gives up its place", async () => {
    await applyConcurrency(1);
    try {
      // The first call holds the only slot; the second, from the other process, waits for it in the object.
      const first = await startStream(clientUrl, 200);
      const firstText = readToEnd(first.body);
      // Long enough that, had it kept its place, the call behind it would not be answered within the test.
      const waiting = api(agentUrl, '/v1/chat/completions', {
        method: 'POST',
        body: JSON.stringify({ model: 'sim-chat', messages: [{ role: 'user', content: 'never mind' }], max_tokens: 100_000, stream: true }),
      }).then(async (response) => ({ status: response.status, text: await response.text() }));
      const waitingId = await waitFor(
        async () => {
          const rows = await fixture.store.db.select({ id: workloads.id }).from(workloads).where(eq(workloads.state, 'running'));
          return rows.find((row) => row.id !== first.workloadId)?.id;
        },
        { timeoutMs: 10_000, what: 'the second call to be running' },
      );
      // Answered by the process that does not run it: the cancel reaches the call through the machine's object.
      expect((await api(clientUrl, `/api/v1/workloads/${waitingId}/cancel`, { method: 'POST' })).status).toBe(202);
      const answer = await waiting;
      expect(answer.text).not.toContain('[DONE]');
      await waitFor(async () => (await workloadState(waitingId)) === 'cancelled', { timeoutMs: 10_000, what: 'the waiting call to be recorded cancelled' });
      // A third call queues behind the first in its own process, then in the object: it is served.
      const third = await api(clientUrl, '/v1/chat/completions', {
        method: 'POST',
        body: JSON.stringify({ model: 'sim-chat', messages: [{ role: 'user', content: 'my turn' }], max_tokens: 2, stream: false }),
      });
      expect(await firstText).toContain('[DONE]');
      expect(third.status).toBe(200);
    } finally {
      await applyConcurrency(4);
    }
  });

  // Last of the inference tests, and retried: under a loaded CI machine workerd (as Miniflare runs it) has been seen
  // not to notice a client leaving even on a fresh connection (docs/workers.md, "What Miniflare cannot show"); a
  // request it keeps serving holds its slot until its answer ends, which must not reach the tests above.
  it('cancels the runtime call on the node when the client goes away mid-stream', { retry: 2 }, async () => {
    const connection = freshConnection();
    const client = new OpenAI({ baseURL: `${clientUrl}/v1`, apiKey: fixture.adminToken, maxRetries: 0, fetch: connection.fetch });
    const active = async () => {
      const machine = (await (await api(clientUrl, `/api/v1/machines/${machineId}`)).json()) as { runtimes: { activeInvocations: number }[] };
      return machine.runtimes.reduce((sum, r) => sum + r.activeInvocations, 0);
    };
    const cancelled = async () => (await fixture.store.db.select({ id: workloads.id }).from(workloads).where(eq(workloads.state, 'cancelled'))).length;
    // Nothing else streams on the node, so that the count is this call's alone: a call an earlier test cancelled
    // may still be stopping there, and one an earlier try of this test left behind runs for up to 20 s.
    await waitFor(async () => (await active()) === 0, { timeoutMs: 30_000, what: 'earlier calls to end on the node' });
    const cancelledBefore = await cancelled();
    const controller = new AbortController();
    let reading: Promise<void> = Promise.resolve();
    try {
      // 2000 tokens at 100/s: 20 s of generation unless the node stops it.
      const stream = await client.chat.completions.create(
        { model: 'sim-chat', messages: [{ role: 'user', content: 'a long one' }], max_tokens: 2000, stream: true },
        { signal: controller.signal },
      );
      let chunks = 0;
      reading = (async () => {
        for await (const _chunk of stream) chunks += 1;
      })().catch(() => {});
      await waitFor(async () => (await active()) > 0, { timeoutMs: 10_000, what: 'the node to report the invocation streaming' });
      controller.abort();
      await reading;
      expect(chunks).toBeGreaterThan(0);
      // The workload's record says whether the Worker's request learned that its client left (it records the
      // workload cancelled when it does), which tells a lost disconnect apart from a lost cancel to the node.
      const states = async () => JSON.stringify(await fixture.store.db.select({ state: workloads.state }).from(workloads));
      await waitFor(async () => (await active()) === 0, { timeoutMs: 8_000, what: 'the node to stop the runtime call' }).catch(async (error: Error) => {
        throw new Error(`${error.message}; workloads: ${await states()}`);
      });
      await waitFor(async () => (await cancelled()) > cancelledBefore, {
        timeoutMs: 5_000,
        what: 'the workload to be recorded cancelled',
      });
    } finally {
      // A failed try leaves nothing behind to fail later (its stream cut by the servers' shutdown after the suite).
      controller.abort();
      await reading;
      await connection.destroy();
    }
  });

  it("fetches a runtime's log lines from the agent through the machine's object", async () => {
    const [assignment] = await fixture.store.db
      .select({ id: assignments.id })
      .from(assignments)
      .where(and(eq(assignments.machineId, machineId), isNull(assignments.removedAt)));
    const response = await api(clientUrl, `/api/v1/machines/${machineId}/runtimes/${assignment!.id}/logs?lines=20`);
    expect(response.status).toBe(200);
    const body = (await response.json()) as { lines: string[] };
    expect(Array.isArray(body.lines)).toBe(true);
  });

  it('delivers a desired-state change to the agent: scaled to 0, its runtime stops', async () => {
    const spec = (await (await api(clientUrl, '/api/v1/deployments/sim-chat')).json()) as Record<string, unknown>;
    const applied = await api(clientUrl, '/api/v1/deployments/sim-chat', { method: 'PUT', body: JSON.stringify({ ...pick(spec), replicas: 0 }) });
    expect(applied.status).toBe(200);
    await waitFor(
      async () => {
        const machine = (await (await api(clientUrl, `/api/v1/machines/${machineId}`)).json()) as { runtimes: unknown[] };
        return machine.runtimes.length === 0;
      },
      { timeoutMs: 30_000, what: 'the agent to stop its runtime' },
    );
  });

  it('revokes the machine: the agent is told over its stream and stops', async () => {
    const response = await api(clientUrl, `/api/v1/machines/${machineId}/revoke`, { method: 'POST', body: JSON.stringify({ reason: 'edge test' }) });
    expect(response.status).toBe(200);
    expect(await waitForExit(agent!, 30_000)).not.toBeNull();
  });
});

/**
 * A client on a connection of its own. A client that aborts a streamed answer on a kept-alive connection it had
 * used before is not noticed by workerd as Miniflare runs it (neither the request's signal nor a failed write:
 * the Worker streams on for as long as the answer lasts), while the same abort on a fresh connection is noticed
 * at once; Cloudflare's edge, which terminates clients' connections in front of the Worker, is not this server.
 * The tests that show what a client leaving does make sure it leaves on a connection workerd watches.
 */
function freshConnection(): { fetch: typeof fetch; destroy(): Promise<void> } {
  const dispatcher = new UndiciAgent();
  return {
    fetch: ((url: string | URL, init?: RequestInit) =>
      undiciFetch(url, { ...init, dispatcher } as Parameters<typeof undiciFetch>[1])) as unknown as typeof fetch,
    destroy: () => dispatcher.destroy(),
  };
}

/** The spec fields of a deployment view, for a PUT. */
function pick(view: Record<string, unknown>): Record<string, unknown> {
  const { id: _id, name: _name, generation: _generation, createdAt: _createdAt, updatedAt: _updatedAt, status: _status, events: _events, ...spec } = view;
  return spec;
}
