import { runtimeRecords, stopLeftRuntimes } from '../helpers/sim-runtimes.js';
import { randomUUID } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import pg from 'pg';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { seedDemoDeployment, startSimNode, stopSimNodes, waitForExit, type SimNode } from '../../functions/hosts/dev/fleet.js';
import { applyDeployment } from '../../functions/services/deployments.js';
import { StartupSpec } from '../../shared/contracts/desired.js';
import type { MachineView } from '../../shared/contracts/machine.js';
import type { SimStats } from '../../sim/options.js';
import { createTestDatabase, describePg } from '../helpers/pg.js';
import { STEADY_LIVENESS, startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';
import { SseReader } from '../helpers/sse.js';
import { startHttpRouter, type HttpRouter } from '../helpers/http-router.js';

/**
 * The data plane end to end (docs/design.md section 5): real control planes, real agent processes and real
 * simulated runtimes, driven with raw fetch and SSE bodies read incrementally. Covers the relay across two
 * instances on one PostgreSQL, cancellation, deadlines, idempotency, failover and the inference metrics.
 */

// ---------------------------------------------------------------------------------------------------------
// Helpers

/** The simulator's text for `n` generated tokens. */
const expectedText = (n: number) => Array.from({ length: n }, (_, i) => `tok${i} `).join('');

/** `/sim/stats` of every runtime the nodes run (dead runtimes are left out). */
async function runtimeStats(nodes: SimNode[]): Promise<SimStats[]> {
  const out: SimStats[] = [];
  for (const node of nodes) {
    for (const record of await runtimeRecords(node)) {
      const response = await fetch(`${record.baseUrl}/sim/stats`, {
        headers: { authorization: `Bearer ${record.token}` },
        signal: AbortSignal.timeout(2_000),
      }).catch(() => null);
      if (response?.ok) out.push((await response.json()) as SimStats);
    }
  }
  return out;
}

const sum = (stats: SimStats[], key: 'requests' | 'aborted' | 'active' | 'completed') => stats.reduce((total, s) => total + s[key], 0);

interface ChatOptions {
  token: string;
  stream: boolean;
  maxTokens: number;
  model?: string;
  prompt?: string;
  headers?: Record<string, string>;
  signal?: AbortSignal;
}

function chat(baseUrl: string, o: ChatOptions): Promise<Response> {
  return fetch(`${baseUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${o.token}`, 'content-type': 'application/json', ...o.headers },
    body: JSON.stringify({
      model: o.model ?? 'sim-chat',
      messages: [{ role: 'user', content: o.prompt ?? 'hello there' }],
      stream: o.stream,
      max_tokens: o.maxTokens,
    }),
    signal: o.signal,
  });
}

/** What a client saw of one streamed response. */
interface StreamOutcome {
  status: number;
  workloadId: string | null;
  content: string;
  /** `data: [DONE]` was received. */
  done: boolean;
  /** The explicit `data: {"error":...}` event, if one came. */
  error: { code: string; message: string } | null;
  /** When the first body byte (the first SSE event) arrived. */
  firstDataAt: number | null;
  endedAt: number;
  /** Events after `[DONE]` or after the error event (there must be none). */
  trailing: number;
}

/** Reads an OpenAI SSE body incrementally to its end. `onFirstData` fires as the first event arrives. */
async function readStream(response: Response, opts: { timeoutMs?: number; onFirstData?: () => void } = {}): Promise<StreamOutcome> {
  const outcome: StreamOutcome = {
    status: response.status,
    workloadId: response.headers.get('x-lunanexa-workload-id'),
    content: '',
    done: false,
    error: null,
    firstDataAt: null,
    endedAt: 0,
    trailing: 0,
  };
  if (!response.headers.get('content-type')?.includes('text/event-stream')) {
    const body = (await response.json().catch(() => ({}))) as { error?: { code: string; message: string } };
    return { ...outcome, error: body.error ?? { code: 'not_a_stream', message: `status ${response.status}` }, endedAt: Date.now() };
  }
  const reader = new SseReader(response.body!);
  const deadline = Date.now() + (opts.timeoutMs ?? 30_000);
  for (;;) {
    const event = await reader.nextEvent(Math.max(1, deadline - Date.now()));
    if (event === null) break;
    if (outcome.firstDataAt === null) {
      outcome.firstDataAt = event.at;
      opts.onFirstData?.();
    }
    if (outcome.done || outcome.error) {
      outcome.trailing += 1;
      continue;
    }
    if (event.data === '[DONE]') {
      outcome.done = true;
      continue;
    }
    const chunk = JSON.parse(event.data) as { error?: { code: string; message: string }; choices?: Array<{ delta?: { content?: string } }> };
    if (chunk.error) outcome.error = { code: chunk.error.code, message: chunk.error.message };
    else outcome.content += chunk.choices?.[0]?.delta?.content ?? '';
  }
  outcome.endedAt = reader.endedAt ?? Date.now();
  return outcome;
}

/** Starts a streaming request and resolves once its first SSE event arrived, with the reader still open. */
async function startStream(baseUrl: string, o: ChatOptions): Promise<{ response: Response; reader: SseReader; workloadId: string }> {
  const response = await chat(baseUrl, { ...o, stream: true });
  expect(response.status).toBe(200);
  const workloadId = response.headers.get('x-lunanexa-workload-id');
  expect(workloadId).toMatch(/\S/);
  const reader = new SseReader(response.body!);
  const first = await reader.nextEvent(15_000);
  expect(first?.data).toContain('chat.completion.chunk');
  return { response, reader, workloadId: workloadId! };
}

/** The rest of an open stream: content, `[DONE]` and the error event. */
async function drain(reader: SseReader, timeoutMs: number) {
  let content = '';
  let done = false;
  let error: { code: string } | null = null;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const event = await reader.nextEvent(Math.max(1, deadline - Date.now()));
    if (event === null) break;
    if (event.data === '[DONE]') done = true;
    else {
      const chunk = JSON.parse(event.data) as { error?: { code: string }; choices?: Array<{ delta?: { content?: string } }> };
      if (chunk.error) error = chunk.error;
      else content += chunk.choices?.[0]?.delta?.content ?? '';
    }
  }
  return { content, done, error, endedAt: reader.endedAt ?? Date.now() };
}

async function machines(plane: TestPlane): Promise<MachineView[]> {
  const response = await plane.admin('/api/v1/machines');
  expect(response.status).toBe(200);
  return ((await response.json()) as { data: MachineView[] }).data;
}

/**
 * Resolves once each named machine is ready with a routable runtime of `deployment` in the instance's routing
 * snapshot; with `local`, once their streams are attached to this very instance (after a restart the previous
 * instance's leases still count until they lapse, and invocations sent there wait out the ack timeout).
 */
async function waitRoutable(plane: TestPlane, names: string[], deployment: string, opts: { local?: boolean } = {}): Promise<MachineView[]> {
  return await waitFor(
    async () => {
      const list = await machines(plane);
      const found = names.map((name) => list.find((m) => m.name === name));
      const ok = found.every((m) => m && m.state === 'ready' && m.runtimes.some((r) => r.deploymentName === deployment && r.routable));
      if (!ok || (opts.local && !found.every((m) => plane.ports.dataPlane.holder.hasLocalStream(m!.id)))) return null;
      // The instance routes from a snapshot of the store: wait until that has them too.
      await plane.ports.dataPlane.routing.refresh();
      const replicas = plane.ports.dataPlane.routing.resolve(plane.workspaceId, deployment)?.replicas ?? [];
      return found.every((m) => replicas.some((r) => r.machineId === m!.id)) ? (found as MachineView[]) : null;
    },
    { timeoutMs: 60_000, intervalMs: 200, what: `${names.join(', ')} routable for ${deployment}` },
  );
}

async function workload(plane: TestPlane, id: string) {
  const response = await plane.admin(`/api/v1/workloads/${id}`);
  expect(response.status).toBe(200);
  return (await response.json()) as { id: string; state: string; machineId: string | null; attempts: number; errorCode: string | null };
}

/** Polls until the workload left `running` (another instance writes its record up to `writeBehindMs` later). */
const settledWorkload = (plane: TestPlane, id: string) =>
  waitFor(
    async () => {
      const response = await plane.admin(`/api/v1/workloads/${id}`);
      if (response.status === 404) return null;
      const w = await workload(plane, id);
      return w.state !== 'running' ? w : null;
    },
    { timeoutMs: 10_000, what: `workload ${id} settled` },
  );

/** Prometheus text to series: name, labels, value. */
function parseMetrics(text: string) {
  const series: Array<{ name: string; labels: Record<string, string>; value: number }> = [];
  for (const line of text.split('\n')) {
    const match = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match) continue;
    const labels: Record<string, string> = {};
    for (const l of (match[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!;
    series.push({ name: match[1]!, labels, value: Number(match[3]) });
  }
  return series;
}

// ---------------------------------------------------------------------------------------------------------
// 1. Two control-plane instances on one PostgreSQL

/**
 * How the node's answers travel (docs/design.md section 5, step 5): up one uplink, or per invocation (the agent's
 * fallback, forced with `--uplink off`); and where they land behind a path-routing proxy: on B, which holds the
 * node's stream, or on A, which pipes them to B over the peer channel.
 */
const CROSS_INSTANCE = [
  { mode: 'auto', kind: 'uplink', landsOn: 'B' },
  { mode: 'auto', kind: 'uplink', landsOn: 'A' },
  { mode: 'off', kind: 'invocation', landsOn: 'A' },
] as const;

describePg.each(CROSS_INSTANCE)(
  'relay across two instances on one PostgreSQL: client on A, stream on B, $kind uploads landing on $landsOn',
  ({ mode, kind, landsOn }) => {
    let db: { url: string; drop(): Promise<void> };
    let planeA: TestPlane;
    let planeB: TestPlane;
    let router: HttpRouter;
    let node: SimNode;
    let machineId: string;
    const uploads = async (plane: TestPlane, route: 'local' | 'piped') =>
      parseMetrics(await plane.ports.metrics.registry.metrics()).find(
        (m) => m.name === 'lunanexa_agent_uploads_total' && m.labels.kind === kind && m.labels.route === route,
      )?.value ?? 0;

    beforeAll(async () => {
      db = await createTestDatabase();
      // Steady liveness: these tests are about the relay, and a loaded machine must not turn the node stale between two.
      planeA = await startTestPlane({ store: 'pg', databaseUrl: db.url, config: STEADY_LIVENESS });
      planeB = await startTestPlane({ store: 'pg', databaseUrl: db.url, config: STEADY_LIVENESS });
      // The node dials B, except for its uploads of answers, which a balancer routing by path may send elsewhere.
      const uploadPort = landsOn === 'A' ? planeA.port : planeB.port;
      router = await startHttpRouter({ route: (_method, path) => (/^\/agent\/v1\/(uplink|invocations\/)/.test(path) ? uploadPort : planeB.port) });
      // Two slots per replica: the admission test below fills them from both instances.
      await seedDemoDeployment(planeB, 1, { loadMs: 100 }, { maxConcurrency: 2 });
      node = await startSimNode(planeB, 'xnode-1', join(planeB.dataDir, 'nodes'), { url: router.url, env: { LUNANEXA_AGENT_UPLINK: mode } });
      // A must see the node as routable through the shared store, though the stream is attached to B.
      [{ id: machineId }] = (await waitRoutable(planeA, ['xnode-1'], 'sim-chat')) as [MachineView];
    }, 120_000);

    afterAll(async () => {
      if (node) {
        await stopSimNodes([node]);
        await stopLeftRuntimes(node);
      }
      await router?.close();
      await planeA?.stop();
      await planeB?.stop();
      await db?.drop();
    });

    it(`the node's answers go by ${kind} upload, opened on ${landsOn}`, async () => {
      const plain = await chat(planeA.url, { token: planeA.adminToken, stream: false, maxTokens: 3 });
      expect(plain.status).toBe(200);
      const landing = landsOn === 'A' ? planeA : planeB;
      expect(await uploads(landing, landsOn === 'A' ? 'piped' : 'local')).toBeGreaterThan(0);
      if (landsOn === 'A') expect(await uploads(planeB, 'local')).toBe(0);
      // The other kind never opened: an uplink that works is used, and `--uplink off` never opens one.
      const other = kind === 'uplink' ? 'invocation' : 'uplink';
      const opened = parseMetrics(await landing.ports.metrics.registry.metrics()).filter(
        (m) => m.name === 'lunanexa_agent_uploads_total' && m.labels.kind === other,
      );
      expect(opened.reduce((n, m) => n + m.value, 0)).toBe(0);
    });

    it('never executes an Idempotency-Key twice across the instances', async () => {
      const key = randomUUID();
      const before = await runtimeStats([node]);
      const first = await chat(planeA.url, { token: planeA.adminToken, stream: false, maxTokens: 2, headers: { 'idempotency-key': key } });
      expect(first.status).toBe(200);
      // The same client through the other instance (a key is scoped to its token): refused, never run again.
      const again = await chat(planeB.url, { token: planeA.adminToken, stream: false, maxTokens: 2, headers: { 'idempotency-key': key } });
      expect(again.status).toBe(409);
      const after = await runtimeStats([node]);
      expect(sum(after, 'requests')).toBe(sum(before, 'requests') + 1);
      expect(after.some((s) => s.lastIdempotencyKey === key)).toBe(true);
    });

    // Once is enough: where the node's answers land does not change where its slots are counted.
    it.runIf(kind === 'uplink' && landsOn === 'B')(
      "a replica's slots hold across the instances: clients on A and B never run more than its maxConcurrency, and a wait at the holder ends with its deadline or its client",
      async () => {
        const requests = [planeA, planeB, planeA, planeB, planeA, planeB].map((plane) =>
          chat(plane.url, { token: plane.adminToken, stream: true, maxTokens: 40 }).then((r) => readStream(r)),
        );
        const outcomes = await Promise.all(requests);
        for (const outcome of outcomes) {
          expect(outcome.status).toBe(200);
          expect(outcome.error).toBeNull();
          expect(outcome.content).toBe(expectedText(40));
        }
        // The six waited their turn at the link holder (B) in twos: two ran together, never more.
        const [stats] = await runtimeStats([node]);
        expect(stats!.peakActive).toBe(2);

        // Both slots held through B: a request on A waits at the holder, and its deadline or its client leaving
        // ends that wait there; neither reaches the runtime.
        const holders = new AbortController();
        const long = [1, 2].map(() => startStream(planeB.url, { token: planeB.adminToken, stream: true, maxTokens: 2_000, signal: holders.signal }));
        await Promise.all(long);
        const before = (await runtimeStats([node]))[0]!.requests;
        const deadline = new Date(Date.now() + 1_500).toISOString();
        const late = await chat(planeA.url, { token: planeA.adminToken, stream: false, maxTokens: 3, headers: { 'x-lunanexa-deadline': deadline } });
        expect(late.status).toBe(504);
        expect(((await late.json()) as { error: { code: string } }).error.code).toBe('deadline_exceeded');
        const [replica] = planeB.ports.dataPlane.routing.resolve(planeB.workspaceId, 'sim-chat')!.replicas;
        const queuedAtB = () => planeB.ports.dataPlane.admission.load(replica!.assignmentId).queued;
        const gone = new AbortController();
        const left = chat(planeA.url, { token: planeA.adminToken, stream: false, maxTokens: 3, signal: gone.signal }).catch((error: Error) => error);
        await waitFor(async () => (queuedAtB() === 1 ? true : null), { timeoutMs: 5_000, what: "A's request waiting at B" });
        gone.abort();
        expect(await left).toBeInstanceOf(Error);
        await waitFor(async () => (queuedAtB() === 0 ? true : null), { timeoutMs: 5_000, what: "the wait at B ended by A's client leaving" });
        holders.abort();
        // The two long streams were the last requests the runtime saw; it is idle again once their aborts reach it.
        await waitFor(async () => ((await runtimeStats([node]))[0]!.active === 0 ? true : null), { timeoutMs: 10_000, what: 'the runtime idle' });
        expect((await runtimeStats([node]))[0]!.requests).toBe(before);
        // The slots the waits would have held are free: a request through A runs at once.
        const after = await chat(planeA.url, { token: planeA.adminToken, stream: false, maxTokens: 3 });
        expect(after.status).toBe(200);
      },
    );

    it('the two instances share the default workspace, and the node stream is held by B only', () => {
      expect(planeA.workspaceId).toBe(planeB.workspaceId);
      expect(planeA.adminToken).not.toBe(planeB.adminToken);
      expect(planeB.ports.dataPlane.holder.hasLocalStream(machineId)).toBe(true);
      expect(planeA.ports.dataPlane.holder.hasLocalStream(machineId)).toBe(false);
    });

    it('serves streaming and plain chat through A, forwarded to B over the authenticated peer channel; nothing is stored in transit', async () => {
      const streamed = await readStream(await chat(planeA.url, { token: planeA.adminToken, stream: true, maxTokens: 30 }));
      expect(streamed.status).toBe(200);
      expect(streamed.error).toBeNull();
      expect(streamed.done).toBe(true);
      expect(streamed.content).toBe(expectedText(30));

      const plain = await chat(planeA.url, { token: planeA.adminToken, stream: false, maxTokens: 7 });
      expect(plain.status).toBe(200);
      const body = (await plain.json()) as { choices: Array<{ message: { content: string } }>; model: string };
      expect(body.choices[0]!.message.content).toBe(expectedText(7));
      expect(body.model).toBe('sim-chat');

      const client = new pg.Client({ connectionString: db.url });
      await client.connect();
      try {
        // Each instance advertises its own peer listener with its lease: never its public port.
        const rows = (await client.query('select id, peer_url from instances where expires_at > now()')).rows as Array<{ id: string; peer_url: string }>;
        const peerOf = (plane: TestPlane) => rows.find((r) => r.id === plane.ports.instanceId)?.peer_url;
        expect(peerOf(planeA)).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
        expect(peerOf(planeB)).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
        expect(peerOf(planeB)).not.toBe(planeB.url);
        // The payload table of data plane v1 is gone: payloads cross in memory and over connections only.
        const tables = await client.query(`select count(*)::int as n from information_schema.tables where table_name = 'invocation_payloads'`);
        expect(tables.rows[0].n).toBe(0);
        // B's peer channel answers only peer tokens of the cluster: an agent or a stranger gets 401 and nothing runs.
        const stranger = await fetch(`${peerOf(planeB)}/peer/v1/invoke`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-lunanexa-machine': machineId, authorization: `Bearer ${planeB.adminToken}` },
          body: '{}',
        });
        expect(stranger.status).toBe(401);
        expect(((await stranger.json()) as { error: { code: string } }).error.code).toBe('unauthorized');
      } finally {
        await client.end();
      }
    });

    it('a client disconnect on A aborts the runtime call on the node held by B', async () => {
      const before = await runtimeStats([node]);
      const client = new AbortController();
      const { workloadId } = await startStream(planeA.url, { token: planeA.adminToken, stream: true, maxTokens: 2_000, signal: client.signal });
      expect(sum(await runtimeStats([node]), 'active')).toBe(sum(before, 'active') + 1);
      client.abort();
      const after = await waitFor(
        async () => {
          const stats = await runtimeStats([node]);
          return sum(stats, 'aborted') > sum(before, 'aborted') ? stats : null;
        },
        { timeoutMs: 10_000, what: 'runtime saw the abort' },
      );
      expect(sum(after, 'aborted')).toBe(sum(before, 'aborted') + 1);
      expect(sum(after, 'active')).toBe(sum(before, 'active'));
      expect((await settledWorkload(planeA, workloadId)).state).toBe('cancelled');
    });

    it('POST /api/v1/workloads/{id}/cancel on B cancels a workload running through A', async () => {
      const before = await runtimeStats([node]);
      const { reader, workloadId } = await startStream(planeA.url, { token: planeA.adminToken, stream: true, maxTokens: 2_000 });
      // The record is written behind the request (group commit): B sees it a moment later.
      await waitFor(async () => (await planeB.admin(`/api/v1/workloads/${workloadId}`)).status === 200, { timeoutMs: 5_000, what: 'B to see the workload' });
      const cancel = await planeB.admin(`/api/v1/workloads/${workloadId}/cancel`, { method: 'POST' });
      expect(cancel.status).toBe(202);
      expect(await cancel.json()).toEqual({ id: workloadId, cancelled: true });
      const rest = await drain(reader, 10_000);
      // Ended early: an explicit error event, or at least closed; never a `[DONE]` of a completed generation.
      expect(rest.done).toBe(false);
      if (rest.error) expect(rest.error.code).toBe('cancelled');
      await waitFor(async () => sum(await runtimeStats([node]), 'aborted') === sum(before, 'aborted') + 1, {
        timeoutMs: 10_000,
        what: 'runtime saw the cancel',
      });
      const finished = await settledWorkload(planeB, workloadId);
      expect(finished.state).toBe('cancelled');
      expect(finished.machineId).toBe(machineId);
      // Cancelling a finished workload is a conflict, on either instance.
      expect((await planeA.admin(`/api/v1/workloads/${workloadId}/cancel`, { method: 'POST' })).status).toBe(409);
    });

    // Last: the node goes away for good.
    it('a node lost mid-stream ends the stream on A with an explicit node_lost error, never a silent truncation', async () => {
      const { reader, workloadId } = await startStream(planeA.url, { token: planeA.adminToken, stream: true, maxTokens: 2_000 });
      node.process.kill('SIGKILL');
      await waitForExit(node.process);
      const rest = await drain(reader, 30_000);
      expect(rest.done).toBe(false);
      expect(rest.error?.code).toBe('node_lost');
      expect((await settledWorkload(planeA, workloadId)).state).toBe('failed');
    });
  },
);

// ---------------------------------------------------------------------------------------------------------
// 2-4. One instance on PGlite with two nodes: cancellation, deadlines, idempotency, failover, metrics; with the
// answers up the uplink, and with the per-invocation fallback (`--uplink off`).

describe.each(['auto', 'off'] as const)('relay on one instance (PGlite) with two nodes, uplink %s', (uplinkMode) => {
  const DEPLOYMENT = 'relay-chat';
  const MODEL = 'sim-chat';
  const TTFT_MS = 700;
  const TOKENS_PER_SECOND = 40;
  const NAMES = ['relay-1', 'relay-2'];
  let plane: TestPlane;
  let nodes: SimNode[] = [];
  const logLines: string[] = [];
  const logger = pino(
    { level: 'debug' },
    new Writable({
      write(chunk: Buffer, _encoding, done) {
        logLines.push(chunk.toString('utf8'));
        done();
      },
    }),
  );
  const token = () => plane.adminToken;
  const request = (o: Omit<ChatOptions, 'token'>) => chat(plane.url, { token: token(), model: DEPLOYMENT, ...o });

  // A node frozen (SIGSTOP) by the ack-timeout test must stay routable until its requests are routed, even
  // on a loaded machine: with the fast test timings it would turn stale 0.75 s after its last heartbeat.
  // Nothing here waits for staleness (a killed node leaves routing when its stream closes).
  const config = { runtimeGraceMs: 5_000 };

  beforeAll(async () => {
    plane = await startTestPlane({ store: 'pglite', logger, config });
    await applyDeployment({
      ctx: plane.systemCtx,
      input: {
        workspaceId: plane.workspaceId,
        name: DEPLOYMENT,
        model: MODEL,
        runtime: { kind: 'simulated', model: MODEL, ttftMs: TTFT_MS, tokensPerSecond: TOKENS_PER_SECOND, loadMs: 100, memoryMiB: 512, failureRate: 0 },
        artifact: null,
        restartPolicy: { mode: 'on-failure', maxRestarts: 5, backoffMs: 500 },
        replicas: 2,
        selector: { sim: 'true' },
        gpus: 0,
        memoryMiB: 512,
        // The failover test freezes a runtime for as long as a loaded machine takes to place requests on it: its
        // agent must not fail it meanwhile.
        startup: StartupSpec.parse({ failureThreshold: 30 }),
      },
    });
    nodes = await Promise.all(NAMES.map((name) => startSimNode(plane, name, join(plane.dataDir, 'nodes'), { env: { LUNANEXA_AGENT_UPLINK: uplinkMode } })));
    await waitRoutable(plane, NAMES, DEPLOYMENT, { local: true });
  }, 120_000);

  afterAll(async () => {
    await stopSimNodes(nodes.filter((n) => n.process.exitCode === null && n.process.signalCode === null));
    for (const node of nodes) await stopLeftRuntimes(node);
    await plane?.stop();
  });

  // What is decided above the transport (a deadline judged by the control plane, the idempotency guard in the
  // store, metrics) is the same whichever way the answers come up: checked once, with the uplink.
  const aboveTransport = it.runIf(uplinkMode === 'auto');

  describe('cancellation, deadlines and idempotency', () => {
    it('POST /api/v1/workloads/{id}/cancel aborts the runtime call and ends the stream', async () => {
      const before = await runtimeStats(nodes);
      const { reader, workloadId } = await startStream(plane.url, { token: token(), model: DEPLOYMENT, stream: true, maxTokens: 400 });
      const cancel = await plane.admin(`/api/v1/workloads/${workloadId}/cancel`, { method: 'POST' });
      expect(cancel.status).toBe(202);
      const rest = await drain(reader, 10_000);
      expect(rest.done).toBe(false);
      if (rest.error) expect(rest.error.code).toBe('cancelled');
      await waitFor(async () => sum(await runtimeStats(nodes), 'aborted') === sum(before, 'aborted') + 1, {
        timeoutMs: 10_000,
        what: 'runtime saw the cancel',
      });
      expect((await settledWorkload(plane, workloadId)).state).toBe('cancelled');
    });

    it('propagates the deadline to the runtime and ends a longer stream with an explicit deadline_exceeded event', async () => {
      const deadline = new Date(Date.now() + 3_000).toISOString();
      const response = await request({ stream: true, maxTokens: 400, headers: { 'x-lunanexa-deadline': deadline } });
      const outcome = await readStream(response, { timeoutMs: 15_000 });
      expect(outcome.status).toBe(200);
      expect(outcome.content.length).toBeGreaterThan(0);
      expect(outcome.done).toBe(false);
      expect(outcome.error?.code).toBe('deadline_exceeded');
      expect(outcome.trailing).toBe(0);
      // Ends at the deadline, not at the end of the generation (400 tokens at 40/s).
      expect(outcome.endedAt).toBeGreaterThanOrEqual(Date.parse(deadline) - 250);
      expect(outcome.endedAt).toBeLessThan(Date.parse(deadline) + 3_000);
      expect((await runtimeStats(nodes)).map((s) => s.lastDeadline)).toContain(deadline);
    });

    aboveTransport('answers a plain request whose generation outlasts its deadline with 504 deadline_exceeded', async () => {
      const deadline = new Date(Date.now() + 3_000).toISOString();
      const response = await request({ stream: false, maxTokens: 400, headers: { 'x-lunanexa-deadline': deadline } });
      const finishedAt = Date.now();
      expect(response.status).toBe(504);
      expect(((await response.json()) as { error: { code: string } }).error.code).toBe('deadline_exceeded');
      expect(finishedAt).toBeGreaterThanOrEqual(Date.parse(deadline) - 250);
      expect(finishedAt).toBeLessThan(Date.parse(deadline) + 3_000);
      expect((await runtimeStats(nodes)).map((s) => s.lastDeadline)).toContain(deadline);
    });

    it('serves a plain request whose generation outlasts the invoke ack timeout, executing it once', async () => {
      const ackMs = plane.ports.config.invokeAckTimeoutMs;
      // ttft + tokens at 40/s: about 1.5 s longer than the ack timeout, well within the default deadline.
      const tokens = Math.ceil(((ackMs + 1_500 - TTFT_MS) * TOKENS_PER_SECOND) / 1000);
      const before = await runtimeStats(nodes);
      const startedAt = Date.now();
      const response = await request({ stream: false, maxTokens: tokens });
      expect(response.status).toBe(200);
      expect(Date.now() - startedAt).toBeGreaterThan(ackMs);
      expect(((await response.json()) as { choices: Array<{ message: { content: string } }> }).choices[0]!.message.content).toBe(expectedText(tokens));
      expect(sum(await runtimeStats(nodes), 'requests')).toBe(sum(before, 'requests') + 1);
    });

    aboveTransport(
      'passes the Idempotency-Key to the runtime and never executes a key twice, even after a restart',
      async () => {
        const first = `key-${randomUUID()}`;
        const single = await request({ stream: false, maxTokens: 2, headers: { 'idempotency-key': first } });
        expect(single.status).toBe(200);
        await single.arrayBuffer();
        expect((await runtimeStats(nodes)).map((s) => s.lastIdempotencyKey)).toContain(first);

        const key = `key-${randomUUID()}`;
        const before = await runtimeStats(nodes);
        const responses = await Promise.all(Array.from({ length: 5 }, () => request({ stream: false, maxTokens: 3, headers: { 'idempotency-key': key } })));
        const bodies = await Promise.all(responses.map(async (r) => (await r.json()) as { error?: { code: string }; choices?: unknown[] }));
        const statuses = responses.map((r) => r.status).sort();
        expect(statuses).toEqual([200, 409, 409, 409, 409]);
        const conflicts = bodies.filter((_, i) => responses[i]!.status === 409);
        expect(conflicts.every((b) => b.error?.code === 'idempotency_key_reused')).toBe(true);
        const winner = responses.find((r) => r.status === 200)!;
        // The refusals name the workload that holds the key.
        expect(
          responses.filter((r) => r.status === 409).every((r) => r.headers.get('x-lunanexa-workload-id') === winner.headers.get('x-lunanexa-workload-id')),
        ).toBe(true);
        const after = await runtimeStats(nodes);
        expect(sum(after, 'requests')).toBe(sum(before, 'requests') + 1);

        // A restarted control plane still refuses the key: the durable workload holds it.
        plane = await plane.restart();
        for (const reused of [key, first]) {
          const again = await request({ stream: false, maxTokens: 3, headers: { 'idempotency-key': reused } });
          expect(again.status).toBe(409);
          expect(((await again.json()) as { error: { code: string } }).error.code).toBe('idempotency_key_reused');
        }
        expect(sum(await runtimeStats(nodes), 'requests')).toBe(sum(after, 'requests'));
        // The agents reconnect by themselves.
        await waitRoutable(plane, NAMES, DEPLOYMENT, { local: true });
      },
      90_000,
    );
  });

  describe('failover', () => {
    it('retries on the other node when a node takes an invoke but never answers it (ack timeout)', async () => {
      const [frozen, other] = nodes as [SimNode, SimNode];
      const otherId = (await machines(plane)).find((m) => m.name === other.name)!.id;
      const ackMs = plane.ports.config.invokeAckTimeoutMs;
      // Frozen, the agent keeps its stream open: the invoke is written to its socket and nothing comes back.
      frozen.process.kill('SIGSTOP');
      let outcomes: StreamOutcome[];
      const startedAt = Date.now();
      try {
        // Two at once: the router puts one on each node.
        outcomes = await Promise.all([0, 1].map(() => request({ stream: true, maxTokens: 5 }).then((r) => readStream(r, { timeoutMs: 20_000 }))));
      } finally {
        frozen.process.kill('SIGCONT');
      }
      for (const outcome of outcomes) {
        expect(outcome.status).toBe(200);
        expect(outcome.error).toBeNull();
        expect(outcome.content).toBe(expectedText(5));
      }
      expect(Math.max(...outcomes.map((o) => o.endedAt)) - startedAt).toBeGreaterThanOrEqual(ackMs);
      const settled = await Promise.all(outcomes.map((o) => settledWorkload(plane, o.workloadId!)));
      expect(settled.map((w) => w.attempts).sort()).toEqual([1, 2]);
      expect(settled.every((w) => w.state === 'succeeded' && w.machineId === otherId)).toBe(true);
      await waitRoutable(plane, NAMES, DEPLOYMENT, { local: true });
    }, 60_000);

    it('retries requests without a first byte on the other node and ends started streams with an explicit error', async () => {
      // 10 s at 40 tokens/s: the survivor's streams run well past the kill.
      const TOKENS = 400;
      const [victim, survivor] = nodes as [SimNode, SimNode];
      const list = await machines(plane);
      const victimId = list.find((m) => m.name === victim.name)!.id;
      const survivorId = list.find((m) => m.name === survivor.name)!.id;
      const [runtime] = await runtimeRecords(victim);
      const [survivorRuntime] = await runtimeRecords(survivor);
      // This instance holds both nodes' streams, so it counts their replicas' slots: a request holds one from the
      // moment it is placed (its invoke sent down its node's stream) until its answer ends or its attempt fails.
      expect([victimId, survivorId].every((id) => plane.ports.dataPlane.holder.hasLocalStream(id))).toBe(true);
      const slots = () => ({
        victim: plane.ports.dataPlane.admission.load(runtime!.assignmentId).active,
        survivor: plane.ports.dataPlane.admission.load(survivorRuntime!.assignmentId).active,
      });
      expect(slots()).toEqual({ victim: 0, survivor: 0 });
      // The survivor takes the victim's requests and the late ones at once: on a loaded machine, the first frames
      // of some may take longer to show than the fast test timings' ack timeout (3 s; it has its own test above),
      // which would fail them there. This test is about a node that dies, not one that is slow to answer.
      const ackMs = plane.ports.config.invokeAckTimeoutMs;
      plane.ports.config.invokeAckTimeoutMs = 15_000;
      onTestFinished(() => {
        plane.ports.config.invokeAckTimeoutMs = ackMs;
      });
      let firstTokensA = 0;
      let endedA = 0;
      const streamRequest = (onFirstData?: () => void) =>
        request({ stream: true, maxTokens: TOKENS }).then((r) => readStream(r, { timeoutMs: 30_000, onFirstData }));

      // Batch A streams on both nodes...
      const batchA = Array.from({ length: 6 }, () =>
        streamRequest(() => (firstTokensA += 1)).finally(() => {
          endedA += 1;
        }),
      );
      await waitFor(async () => firstTokensA === 6, { intervalMs: 5, timeoutMs: 15_000, what: 'batch A streaming' });
      const streaming = slots();
      expect(streaming.victim + streaming.survivor).toBe(6);
      expect(streaming.victim).toBeGreaterThan(0);
      expect(streaming.survivor).toBeGreaterThan(0);
      // ...then the victim's runtime freezes: its batch A streams stall, their first bytes long at their clients,
      // and whatever reaches it from now on gets no first byte before the node dies, however slow this machine is
      // (its agent would fail it only after 30 missed readiness probes).
      process.kill(runtime!.pid, 'SIGSTOP');
      let killedAt = 0;
      onTestFinished(() => {
        if (!killedAt) process.kill(runtime!.pid, 'SIGCONT');
      });
      // Batch B is placed on both nodes (each request holds a slot of its replica, its invoke sent down its node's
      // stream) and waits there for its first token.
      let endedB = 0;
      const batchB = Array.from({ length: 6 }, () =>
        streamRequest().finally(() => {
          endedB += 1;
        }),
      );
      // Placed or ended: the victim's requests cannot end while its runtime is frozen, and the survivor's may end
      // before the last of batch B is placed on a loaded machine, freeing their slots.
      const placedB = () => {
        const now = slots();
        return { onVictim: now.victim - streaming.victim, onSurvivor: now.survivor - (streaming.survivor - endedA) + endedB };
      };
      const placed = await waitFor(
        async () => {
          const now = placedB();
          return now.onVictim + now.onSurvivor >= 6 ? now : null;
        },
        { intervalMs: 5, timeoutMs: 15_000, what: 'batch B placed on both nodes' },
      );
      const { onVictim } = placed;
      expect(onVictim).toBeGreaterThan(0);
      expect(placed.onSurvivor).toBeGreaterThan(0);

      // Kill the agent and its runtime, without warning, while batch A streams and batch B waits.
      killedAt = Date.now();
      victim.process.kill('SIGKILL');
      process.kill(runtime!.pid, 'SIGKILL');
      // Sent after the kill, before the node can be marked stale: must be served all the same.
      const afterKill = Array.from({ length: 4 }, () => streamRequest());
      await waitForExit(victim.process);

      const a = await Promise.all(batchA);
      const b = await Promise.all(batchB);
      const late = await Promise.all(afterKill);
      const all = [...a, ...b, ...late];
      // Timings relative to the kill, to tune this test on a slow machine: RELAY_TEST_DEBUG=1.
      if (process.env.RELAY_TEST_DEBUG) {
        const ws = await Promise.all(all.map((o) => (o.workloadId ? settledWorkload(plane, o.workloadId) : null)));
        console.log(
          all.map((o, i) => ({
            i,
            status: o.status,
            first: o.firstDataAt && o.firstDataAt - killedAt,
            end: o.endedAt - killedAt,
            done: o.done,
            err: o.error && `${o.error.code}: ${o.error.message}`,
            node: ws[i] && (ws[i].machineId === victimId ? 'victim' : 'survivor'),
            attempts: ws[i]?.attempts,
          })),
        );
      }

      // No request lost or silently truncated: every stream ends with [DONE] or an explicit error event.
      for (const outcome of all) {
        expect(outcome.status).toBe(200);
        expect(outcome.done || outcome.error !== null).toBe(true);
        expect(outcome.trailing).toBe(0);
        if (outcome.done) expect(outcome.content).toBe(expectedText(TOKENS));
      }
      // Errors only where bytes had already reached the client before the kill: batch A's streams on the victim,
      // each of them, and nothing else.
      const errored = all.filter((o) => o.error);
      for (const outcome of errored) expect(outcome.firstDataAt!).toBeLessThan(killedAt);
      expect(errored).toHaveLength(streaming.victim);
      // Whatever had no byte when the node died completes: batch B's requests on the victim, and every late one.
      const unstarted = all.filter((o) => o.firstDataAt === null || o.firstDataAt >= killedAt);
      expect(unstarted.length).toBeGreaterThanOrEqual(onVictim + late.length);
      for (const outcome of unstarted) {
        expect(outcome.error).toBeNull();
        expect(outcome.done).toBe(true);
      }
      const workloads = await Promise.all(all.map((o) => settledWorkload(plane, o.workloadId!)));
      // Batch B's requests on the victim were retried on the survivor (late ones sent there before the plane knew may
      // have been too), and nothing else of batch B was.
      expect(workloads.slice(6, 12).filter((w) => w.attempts > 1)).toHaveLength(onVictim);
      const retried = workloads.filter((w) => w.attempts > 1);
      for (const w of retried) {
        expect(w.state).toBe('succeeded');
        expect(w.machineId).toBe(survivorId);
      }
      for (const [i, w] of workloads.entries()) {
        if (all[i]!.error) {
          expect(w.machineId).toBe(victimId);
          expect(w.state).toBe('failed');
        }
      }
      // Every slot is free again, the dead node's too: nothing held one past its request.
      expect(slots()).toEqual({ victim: 0, survivor: 0 });
    }, 90_000);
  });

  describe('metrics and logs', () => {
    aboveTransport('exports latency, rate, queue, cancellation and retry metrics by model, deployment and node', async () => {
      const marker = `MARKER-${randomUUID()}`;
      const live = (await machines(plane)).filter((m) => m.state === 'ready').map((m) => m.name);
      const streamed = await readStream(await request({ stream: true, maxTokens: 10, prompt: `tell me about ${marker}` }));
      expect(streamed.done).toBe(true);
      const plain = await request({ stream: false, maxTokens: 5, prompt: `plain ${marker}` });
      expect(plain.status).toBe(200);
      await plain.arrayBuffer();
      // A client that goes away: a cancellation.
      const before = await runtimeStats(nodes);
      const client = new AbortController();
      await startStream(plane.url, { token: token(), model: DEPLOYMENT, stream: true, maxTokens: 400, prompt: `gone ${marker}`, signal: client.signal });
      client.abort();
      await waitFor(async () => sum(await runtimeStats(nodes), 'aborted') > sum(before, 'aborted'), { timeoutMs: 10_000, what: 'abort seen' });
      // Bad input carrying the marker.
      const bad = await request({ stream: false, maxTokens: -1, prompt: `bad ${marker}` });
      expect(bad.status).toBe(400);

      const response = await plane.admin('/metrics');
      expect(response.status).toBe(200);
      const text = await response.text();
      expect(text).toContain('lunanexa_time_to_first_token_seconds_bucket');
      const series = parseMetrics(text);
      const counted = (name: string) => series.filter((s) => s.name === name && s.labels.model === MODEL && s.labels.deployment === DEPLOYMENT && s.value > 0);
      for (const histogram of [
        'lunanexa_time_to_first_token_seconds',
        'lunanexa_inter_token_latency_seconds',
        'lunanexa_tokens_per_second',
        'lunanexa_request_duration_seconds',
        'lunanexa_queue_seconds',
      ]) {
        const counts = counted(`${histogram}_count`);
        expect(counts.length, histogram).toBeGreaterThan(0);
        for (const s of counts) expect(NAMES, `${histogram} node label`).toContain(s.labels.node);
        expect(
          counts.some((s) => live.includes(s.labels.node!)),
          histogram,
        ).toBe(true);
        expect(counted(`${histogram}_bucket`).length, histogram).toBeGreaterThan(0);
      }
      for (const counter of ['lunanexa_cancellations_total', 'lunanexa_retries_total']) {
        const values = counted(counter);
        expect(values.length, counter).toBeGreaterThan(0);
        for (const s of values) expect(NAMES, `${counter} node label`).toContain(s.labels.node);
      }

      // No payload text in the control plane's logs (at debug level) nor in the nodes' logs.
      expect(logLines.join('')).not.toContain(marker);
      for (const node of nodes) {
        const agentLog = await readFile(node.logFile, 'utf8');
        expect(agentLog).toContain('stream open');
        expect(agentLog).not.toContain(marker);
        const dir = join(node.stateDir, 'runtimes');
        for (const file of (await readdir(dir)).filter((f) => f.endsWith('.log'))) expect(await readFile(join(dir, file), 'utf8')).not.toContain(marker);
      }
    });
  });
});
