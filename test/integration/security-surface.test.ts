import { chmod, mkdir, mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { and, eq, isNull } from 'drizzle-orm';
import type { Frame, Invoke } from '../../shared/contracts/relay.js';
import { encodeFrame } from '../../shared/frame-codec.js';
import { ErrorEnvelope } from '../../shared/contracts/common.js';
import { createApiToken } from '../../functions/services/api-tokens.js';
import { reconcileOnce } from '../../functions/controller/driver.js';
import { assignments, machines } from '../../functions/store/schema/index.js';
import { applyTestDeployment } from '../helpers/deployments.js';
import { enrollTestMachine, heartbeatBody, runtimeReport, type TestMachine } from '../helpers/machine.js';
import { startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';
import { SseReader } from '../helpers/sse.js';

/**
 * The edges of the surface (issue 7, findings 4 and 5): what a runtime may serve through the API origin, the
 * headers every answer carries, who may read /metrics and how much of it a machine can make the control plane
 * hold, and the modes of the embedded store's files.
 */

/** Nothing here is about liveness: a machine stays ready for the whole suite. */
const STEADY = { heartbeatIntervalMs: 10_000, runtimeGraceMs: 10_000, machineLifetimeMs: 60_000, runtimeTtlMs: 60_000 };

const SECURITY_HEADERS = {
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'content-security-policy': "default-src 'none'; frame-ancestors 'none'",
};

function expectSecurityHeaders(response: Response, what: string) {
  for (const [name, value] of Object.entries(SECURITY_HEADERS)) expect(response.headers.get(name), `${what}: ${name}`).toBe(value);
}

/** One frame line of an upload. */
type FrameLine = Record<string, unknown>;

/**
 * A machine driven by the test over the real protocol: it holds its stream, reports every replica placed on it
 * `ready`, and answers each invoke with the frames `answer` gives: a runtime that serves whatever the test wants.
 */
async function startScriptedNode(plane: TestPlane, name: string, labels: Record<string, string>, answer: (invoke: Invoke) => FrameLine[]) {
  const machine = await enrollTestMachine(plane, name, labels);
  const db = plane.ports.store.db;
  let seq = 0;
  let stopped = false;
  const beat = async () => {
    const rows = await db
      .select({ id: assignments.id, deploymentId: assignments.deploymentId })
      .from(assignments)
      .where(and(eq(assignments.machineId, machine.machineId), isNull(assignments.removedAt)));
    const [row] = await db.select({ desiredGen: machines.desiredGen }).from(machines).where(eq(machines.id, machine.machineId));
    const gen = row?.desiredGen ?? 0;
    const runtimes = rows.map((r) => runtimeReport(r.id, r.deploymentId, { state: 'ready', gen }));
    const response = await machine.request('POST', '/agent/v1/heartbeat', heartbeatBody(machine, ++seq, { gen, runtimes }));
    if (response.status !== 200) throw new Error(`heartbeat refused: ${response.status} ${await response.text()}`);
  };
  await beat();
  const controller = new AbortController();
  const stream = await fetch(`${plane.url}/agent/v1/stream`, {
    headers: { authorization: `Bearer ${await machine.sign('GET', '/agent/v1/stream', '')}` },
    signal: controller.signal,
  });
  if (stream.status !== 200) throw new Error(`stream refused: ${stream.status}`);
  const reader = new SseReader(stream.body!);
  const upload = async (invoke: Invoke) => {
    const path = `/agent/v1/invocations/${invoke.invocationId}/frames`;
    // Binary frames as an agent sends them: `accept` first, the scripted ones after, offsets counted from 0.
    const frames = [{ t: 'accept' }, ...answer(invoke)].map((frame, o) =>
      encodeFrame(invoke.invocationId, { ...frame, o, ...(frame.t === 'data' ? { d: new TextEncoder().encode(String(frame.d)) } : {}) } as Frame),
    );
    await fetch(`${plane.url}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${await machine.sign('POST', path, '')}` },
      body: Buffer.concat(frames),
    }).catch(() => {});
  };
  const pump = (async () => {
    while (!stopped) {
      let item;
      try {
        item = await reader.nextEvent(500);
      } catch {
        continue;
      }
      if (!item) return;
      if (item.event === 'invoke') void upload(JSON.parse(item.data) as Invoke);
    }
  })();
  const beats = (async () => {
    while (!stopped) {
      await new Promise((r) => setTimeout(r, 500));
      if (!stopped) await beat().catch(() => {});
    }
  })();
  return {
    machine,
    stream,
    beat,
    async stop() {
      stopped = true;
      controller.abort();
      await Promise.all([pump, beats]);
    },
  };
}

describe('the surface of the control plane', () => {
  let plane: TestPlane;
  let node: Awaited<ReturnType<typeof startScriptedNode>>;
  let viewer: string;
  let inference: string;
  /** What the scripted runtime answers next: content type and body. */
  let served: { status: number; contentType: string; body: string } = { status: 200, contentType: 'application/json', body: '{}' };

  beforeAll(async () => {
    plane = await startTestPlane({ store: 'pglite', config: STEADY });
    viewer = (await createApiToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name: 'viewer', role: 'viewer' } })).token;
    inference = (await createApiToken({ ctx: plane.systemCtx, input: { workspaceId: plane.workspaceId, name: 'consumer', role: 'inference' } })).token;
    node = await startScriptedNode(plane, 'scripted', { scripted: 'yes' }, () => [
      { t: 'head', status: served.status, contentType: served.contentType },
      { t: 'data', d: served.body },
      { t: 'end', tokens: 1 },
    ]);
    await applyTestDeployment(plane, 'scripted-model', { scripted: 'yes' });
    await reconcileOnce({ ctx: plane.systemCtx });
    await node.beat();
    await waitFor(
      async () => {
        await plane.ports.dataPlane.routing.refresh();
        return plane.ports.dataPlane.routing.resolve(plane.workspaceId, 'scripted-model')?.replicas.length === 1;
      },
      { timeoutMs: 20_000, what: 'the scripted replica routable' },
    );
  });
  afterAll(async () => {
    await node?.stop();
    await plane?.stop();
  });

  const chat = (extra: Record<string, unknown> = {}) =>
    fetch(`${plane.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${inference}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'scripted-model', messages: [{ role: 'user', content: 'hi' }], ...extra }),
    });

  describe('relayed answers carry only the content types the OpenAI surface allows', () => {
    it('relays application/json and text/event-stream (with parameters)', async () => {
      served = { status: 200, contentType: 'application/json; charset=utf-8', body: '{"object":"chat.completion"}' };
      const json = await chat();
      expect(json.status).toBe(200);
      expect(await json.text()).toBe('{"object":"chat.completion"}');
      served = { status: 200, contentType: 'text/event-stream', body: 'data: {"x":1}\n\ndata: [DONE]\n\n' };
      const stream = await chat({ stream: true });
      expect(stream.status).toBe(200);
      expect(stream.headers.get('content-type')).toBe('text/event-stream');
      expect(await stream.text()).toBe('data: {"x":1}\n\ndata: [DONE]\n\n');
    });

    it('relays the parsed media type and charset only, in canonical form (second security review, L7)', async () => {
      served = { status: 200, contentType: 'Application/JSON;Charset="UTF-8"', body: '{"object":"chat.completion"}' };
      const json = await chat();
      expect(json.status).toBe(200);
      expect(json.headers.get('content-type')).toBe('application/json; charset=utf-8');
      expect(await json.text()).toBe('{"object":"chat.completion"}');
    });

    for (const contentType of [
      'text/html',
      'text/html; charset=utf-8',
      'text/plain',
      'application/javascript',
      'image/svg+xml',
      'application/json-seq',
      '',
      // The whole value is read, not only what precedes the first `;` (second security review, L7).
      'application/json; charset=utf-8, text/html',
      'text/event-stream, text/html',
      'application/json; charset=iso-8859-1',
      'application/json; boundary=x',
    ]) {
      it(`turns a runtime answering ${JSON.stringify(contentType)} into a 502 envelope, streamed or not`, async () => {
        served = { status: 200, contentType, body: '<html><script>alert(1)</script></html>' };
        for (const stream of [false, true]) {
          const response = await chat({ stream });
          const text = await response.text();
          expect(response.status, text).toBe(502);
          expect(response.headers.get('content-type')).toMatch(/^application\/json/);
          expect(text).not.toContain('<html');
          const body = JSON.parse(text) as { error: { type: string; code: string } };
          expect(body.error).toMatchObject({ type: 'server_error', code: 'unsupported_content_type' });
          expectSecurityHeaders(response, `502 for ${contentType}`);
        }
      });
    }
  });

  describe('security headers on every answer', () => {
    it('JSON, errors, 404s, the OpenAPI document, /v1 (whole and streamed), the agent gateway and its SSE stream', async () => {
      served = { status: 200, contentType: 'text/event-stream', body: 'data: [DONE]\n\n' };
      const stream = await chat({ stream: true });
      expect(stream.status).toBe(200);
      await stream.text();
      expectSecurityHeaders(stream, 'streamed /v1 answer');
      served = { status: 200, contentType: 'application/json', body: '{}' };
      const whole = await chat();
      expect(whole.status).toBe(200);
      expectSecurityHeaders(whole, 'whole /v1 answer');

      const answers: Array<[string, Promise<Response>]> = [
        ['/healthz', fetch(`${plane.url}/healthz`)],
        ['/readyz', fetch(`${plane.url}/readyz`)],
        ['/metrics', fetch(`${plane.url}/metrics`, { headers: { authorization: `Bearer ${viewer}` } })],
        ['GET /api/v1/machines', plane.admin('/api/v1/machines')],
        ['openapi.json', fetch(`${plane.url}/api/v1/openapi.json`)],
        ['401 /api/v1', fetch(`${plane.url}/api/v1/machines`)],
        ['404 /api/v1', plane.admin('/api/v1/no-such-route')],
        ['413 /api/v1', plane.admin('/api/v1/enrollment-tokens', { method: 'POST', body: JSON.stringify({ pad: 'x'.repeat(100_000) }) })],
        ['404 outside every surface', fetch(`${plane.url}/nowhere`)],
        ['/v1/models', fetch(`${plane.url}/v1/models`, { headers: { authorization: `Bearer ${inference}` } })],
        ['401 /v1', fetch(`${plane.url}/v1/models`)],
        ['404 /v1', fetch(`${plane.url}/v1/nowhere`, { headers: { authorization: `Bearer ${inference}` } })],
        ['/agent/v1/jwks', fetch(`${plane.url}/agent/v1/jwks`)],
        ['401 /agent/v1', fetch(`${plane.url}/agent/v1/heartbeat`, { method: 'POST', body: '{}' })],
      ];
      for (const [what, pending] of answers) {
        const response = await pending;
        await response.arrayBuffer();
        expectSecurityHeaders(response, what);
      }

      // The agent's own SSE stream.
      const m = await enrollTestMachine(plane, 'headers-probe');
      const controller = new AbortController();
      const sse = await fetch(`${plane.url}/agent/v1/stream`, {
        headers: { authorization: `Bearer ${await m.sign('GET', '/agent/v1/stream', '')}` },
        signal: controller.signal,
      });
      expect(sse.status).toBe(200);
      expectSecurityHeaders(sse, 'agent stream');
      controller.abort();
    });
  });

  describe('/metrics', () => {
    it('requires an API token of role viewer or above by default', async () => {
      const none = await fetch(`${plane.url}/metrics`);
      expect(none.status).toBe(401);
      expect(ErrorEnvelope.parse(await none.json()).error.code).toBe('unauthorized');
      const consumer = await fetch(`${plane.url}/metrics`, { headers: { authorization: `Bearer ${inference}` } });
      expect(consumer.status).toBe(403);
      expect((await fetch(`${plane.url}/metrics`, { headers: { authorization: 'Bearer lnx_not-a-token' } })).status).toBe(401);
      // A viewer scrapes its own workspace's series; the installation's are for an admin of the default workspace.
      const ok = await fetch(`${plane.url}/metrics`, { headers: { authorization: `Bearer ${viewer}` } });
      expect(ok.status).toBe(200);
      const own = await ok.text();
      expect(own).toContain('# TYPE lunanexa_node_metric gauge');
      expect(own).not.toContain('lunanexa_heartbeats_total');
      expect(await (await plane.admin('/metrics')).text()).toContain('lunanexa_heartbeats_total');
    });

    it('is open with metricsPublic (what npm start uses)', async () => {
      const open = await startTestPlane({ store: 'pglite', config: { metricsPublic: true } });
      try {
        const response = await fetch(`${open.url}/metrics`);
        expect(response.status).toBe(200);
        expect(await response.text()).toContain('lunanexa_');
      } finally {
        await open.stop();
      }
    });

    it("bounds a machine's node metrics: a flood of new names grows no series, and a revoked machine's series go", async () => {
      const m: TestMachine = await enrollTestMachine(plane, 'metric-flood');
      const scrape = async () => (await (await fetch(`${plane.url}/metrics`, { headers: { authorization: `Bearer ${viewer}` } })).text()).split('\n');
      const seriesOf = (lines: string[], machineId: string) =>
        lines.filter((l) => l.startsWith('lunanexa_node_metric{') && l.includes(`machine="${machineId}"`));

      let seq = 0;
      for (let beat = 0; beat < 40; beat += 1) {
        const metrics: Record<string, number> = { load1: 0.5, mem_free_mib: 1024, invocations_active: 0 };
        for (let i = 0; i < 60; i += 1) metrics[`flood_${beat}_${i}`] = i;
        const response = await m.request('POST', '/agent/v1/heartbeat', heartbeatBody(m, ++seq, { metrics }));
        expect(response.status).toBe(200);
      }
      const series = seriesOf(await scrape(), m.machineId);
      // The agent's own names are kept; 2,400 invented ones are not.
      expect(series.some((l) => l.includes('name="load1"'))).toBe(true);
      expect(series.filter((l) => l.includes('flood_'))).toEqual([]);
      expect(series.length).toBeLessThanOrEqual(16);
      const heapSeries = (plane.ports.metrics.nodeMetric as unknown as { hashMap: Record<string, unknown> }).hashMap;
      expect(Object.keys(heapSeries).filter((key) => key.includes(m.machineId)).length).toBeLessThanOrEqual(16);

      const revoked = await plane.admin(`/api/v1/machines/${m.machineId}/revoke`, { method: 'POST', body: JSON.stringify({ reason: 'bounds' }) });
      expect(revoked.status).toBe(200);
      expect(seriesOf(await scrape(), m.machineId)).toEqual([]);
    });
  });
});

describe('the embedded store on disk', () => {
  let dataDir: string;
  beforeAll(async () => {
    dataDir = join(await mkdtemp(join(tmpdir(), 'lnx-modes-')), 'data');
    // As an operator's `mkdir` leaves it: open to the group and others.
    await mkdir(dataDir, { mode: 0o755 });
    await chmod(dataDir, 0o755);
  });
  afterAll(async () => {
    await rm(join(dataDir, '..'), { recursive: true, force: true });
  });

  async function modes(dir: string): Promise<{ files: Map<string, number>; dirs: Map<string, number> }> {
    const files = new Map<string, number>();
    const dirs = new Map<string, number>([[dir, (await stat(dir)).mode & 0o777]]);
    for (const entry of await readdir(dir, { withFileTypes: true, recursive: true })) {
      const path = join(entry.parentPath, entry.name);
      const mode = (await stat(path)).mode & 0o777;
      if (entry.isDirectory()) dirs.set(path, mode);
      else if (entry.isFile()) files.set(path, mode);
    }
    return { files, dirs };
  }

  it('keeps the data dir 0700 and every file of the PGlite store 0600 under 0700 directories, after writes and a restart', async () => {
    let plane = await startTestPlane({ store: 'pglite', dataDir });
    try {
      // Writes that make PostgreSQL create files of its own.
      for (let i = 0; i < 3; i += 1)
        expect((await plane.admin('/api/v1/enrollment-tokens', { method: 'POST', body: JSON.stringify({ ttlSeconds: 60 }) })).status).toBe(201);
      plane = await plane.restart();
      expect((await stat(dataDir)).mode & 0o777).toBe(0o700);
      const { files, dirs } = await modes(join(dataDir, 'store'));
      expect(files.size).toBeGreaterThan(10);
      expect([...files].filter(([, mode]) => mode !== 0o600).map(([path, mode]) => `${path} ${mode.toString(8)}`)).toEqual([]);
      expect([...dirs].filter(([, mode]) => mode !== 0o700).map(([path, mode]) => `${path} ${mode.toString(8)}`)).toEqual([]);
      expect((await stat(join(dataDir, 'admin.token'))).mode & 0o777).toBe(0o600);
    } finally {
      await plane.stop();
    }
  });
});
