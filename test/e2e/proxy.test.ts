import { randomUUID } from 'node:crypto';
import { mkdir, readFile } from 'node:fs/promises';
import { createServer, type IncomingMessage } from 'node:http';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { createProxy, type ProxyServer } from 'proxy';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnAgent, startSimNode, stopSimNodes, waitForExit, type SimNode } from '../../functions/hosts/dev/fleet.js';
import { createEnrollmentToken } from '../../functions/services/enrollment.js';
import type { MachineView } from '../../shared/contracts/machine.js';
import { applyTestDeployment } from '../helpers/deployments.js';
import { startHttpRouter, type HttpRouter } from '../helpers/http-router.js';
import { startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';
import { SseReader } from '../helpers/sse.js';

/** The simulator's text for `n` generated tokens. */
const expectedText = (n: number) => Array.from({ length: n }, (_, i) => `tok${i} `).join('');

const UPLINK_CONFIRMED = 'uplink confirmed';
const UPLINK_FALLBACK = 'uplink unavailable: per-invocation uploads until the stream reconnects';

/** No proxy from the environment of the test run: each node says for itself how it reaches the control plane. */
const NO_PROXY_ENV = { HTTP_PROXY: '', HTTPS_PROXY: '', NO_PROXY: '', http_proxy: '', https_proxy: '', no_proxy: '' };

/**
 * Behind a corporate firewall the agent reaches the control plane only through an HTTP CONNECT proxy:
 * every outbound request (enroll, stream, heartbeat, the uplink or the per-invocation uploads of answers) must go
 * through it, and NO_PROXY must bypass it. Behind a proxy that buffers request bodies, the uplink is never
 * confirmed and the agent falls back to per-invocation uploads.
 */
describe('agent through a real CONNECT proxy', () => {
  let plane: TestPlane;
  let proxy: ProxyServer;
  let proxyUrl: string;
  const tunnels: string[] = [];
  const nodes: SimNode[] = [];
  /** What went through the proxy's tunnels while a test records it: `up` from the agent, `down` to it. */
  let traffic: { up: Buffer[]; down: Buffer[] } | null = null;

  beforeAll(async () => {
    plane = await startTestPlane({ store: 'pglite' });
    proxy = createProxy(createServer());
    proxy.on('connect', (request: IncomingMessage, socket: Duplex) => {
      tunnels.push(String(request.url));
      // Taps both directions of the tunnel: the proxy pipes the client socket to the target and back.
      socket.on('data', (chunk: Buffer) => traffic?.up.push(Buffer.from(chunk)));
      const write = socket.write.bind(socket) as (...args: unknown[]) => boolean;
      socket.write = ((chunk: unknown, ...rest: unknown[]) => {
        if (traffic && (typeof chunk === 'string' || chunk instanceof Uint8Array)) traffic.down.push(Buffer.from(chunk));
        return write(chunk, ...rest);
      }) as typeof socket.write;
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    proxyUrl = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await stopSimNodes(nodes);
    await new Promise((resolve) => proxy.close(resolve));
    await plane.stop();
  });

  const ready = async (name: string) => {
    const response = await plane.admin('/api/v1/machines');
    const machine = ((await response.json()) as { data: MachineView[] }).data.find((m) => m.name === name);
    return machine?.state === 'ready' && machine.streamAttached ? machine : null;
  };

  it('enrolls, streams and reports through HTTPS_PROXY/HTTP_PROXY', async () => {
    const env = { HTTP_PROXY: proxyUrl, HTTPS_PROXY: proxyUrl, NO_PROXY: '' };
    nodes.push(await startSimNode(plane, 'behind-proxy', join(plane.dataDir, 'nodes'), { env }));
    await waitFor(() => ready('behind-proxy'), { timeoutMs: 30_000, what: 'node ready through the proxy' });
    const target = `127.0.0.1:${plane.port}`;
    // One tunnel for enroll, one for the agent's connection pool (stream + reports) at least.
    expect(tunnels.filter((t) => t === target).length).toBeGreaterThanOrEqual(2);
  });

  it('goes direct for hosts in NO_PROXY', async () => {
    // The node behind the proxy opens a tunnel for each new connection: stop it, so every tunnel counted
    // from here on could only come from the node that must bypass the proxy.
    await stopSimNodes(nodes.splice(0));
    const before = tunnels.length;
    const env = { HTTP_PROXY: proxyUrl, HTTPS_PROXY: proxyUrl, NO_PROXY: '127.0.0.1' };
    nodes.push(await startSimNode(plane, 'bypass-proxy', join(plane.dataDir, 'nodes'), { env }));
    await waitFor(() => ready('bypass-proxy'), { timeoutMs: 30_000, what: 'node ready without the proxy' });
    expect(tunnels.length).toBe(before);
  });

  // ---------------------------------------------------------------------------------------------------------
  // Inference answers: up the uplink, or per invocation.

  /** `lunanexa_agent_uploads_total` of the plane, by kind (all routes). */
  const uploads = async () => {
    const counts = { uplink: 0, invocation: 0 };
    for (const line of (await plane.ports.metrics.registry.metrics()).split('\n')) {
      const match = /^lunanexa_agent_uploads_total\{(.*)\} (\S+)$/.exec(line);
      const kind = match && /kind="(\w+)"/.exec(match[1]!)?.[1];
      if (kind === 'uplink' || kind === 'invocation') counts[kind] += Number(match![2]);
    }
    return counts;
  };

  /** Enrolls `name` (through `url`, with `env`), labelled `node=<name>`; runs nothing yet. */
  async function enrollNode(name: string, opts: { env: NodeJS.ProcessEnv; url?: string }): Promise<void> {
    const stateDir = join(plane.dataDir, 'nodes', name);
    await mkdir(stateDir, { recursive: true, mode: 0o700 });
    const token = await createEnrollmentToken({
      ctx: plane.systemCtx,
      input: { workspaceId: plane.workspaceId, name, labels: { node: name }, ttlSeconds: 300 },
    });
    const enroll = spawnAgent(['enroll', '--url', opts.url ?? plane.url, '--token', '-', '--name', name, '--state-dir', stateDir], {
      logFile: join(stateDir, 'agent.log'),
      env: { ...opts.env, LUNANEXA_ENROLLMENT_TOKEN: token.token },
    });
    expect(await waitForExit(enroll, 60_000), `enrolling ${name}`).toBe(0);
  }

  /**
   * Runs the enrolled node `name` with a one-replica deployment of its own, placed on it by its label: every request
   * for that deployment lands on this node and no other. Resolves once the plane routes to it.
   */
  async function runNodeWithDeployment(name: string, env: NodeJS.ProcessEnv): Promise<SimNode> {
    // Enrolled already: startSimNode only runs it.
    const node = await startSimNode(plane, name, join(plane.dataDir, 'nodes'), { env });
    nodes.push(node);
    await applyTestDeployment(plane, name, { node: name });
    await waitFor(
      async () => {
        const response = await plane.admin('/api/v1/machines');
        const machine = ((await response.json()) as { data: MachineView[] }).data.find((m) => m.name === name);
        if (!(machine?.state === 'ready' && machine.runtimes.some((r) => r.deploymentName === name && r.routable))) return null;
        // The instance routes from a snapshot of the store: wait until that has it too.
        await plane.ports.dataPlane.routing.refresh();
        return plane.ports.dataPlane.routing.resolve(plane.workspaceId, name)?.replicas.some((r) => r.machineId === machine.id) ?? false;
      },
      { timeoutMs: 30_000, intervalMs: 200, what: `${name} routable` },
    );
    return node;
  }

  /**
   * Enrolls `name` while the nodes of earlier tests stop (enrolling uploads nothing), so that only the node under
   * test runs from then on, and every upload counted is its own.
   */
  async function onlyNode(name: string, opts: { env: NodeJS.ProcessEnv; url?: string }): Promise<void> {
    await Promise.all([enrollNode(name, opts), stopSimNodes(nodes.splice(0))]);
  }

  const logOf = (node: SimNode) => readFile(node.logFile, 'utf8');

  /** A streamed and a plain chat completion for `deployment`, their prompts carrying `marker`: checks both answers. */
  async function chatBothWays(deployment: string, marker: string): Promise<void> {
    const chat = (stream: boolean, maxTokens: number, prompt: string) =>
      fetch(`${plane.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${plane.adminToken}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: deployment, messages: [{ role: 'user', content: prompt }], stream, max_tokens: maxTokens }),
        signal: AbortSignal.timeout(20_000),
      });

    const streamed = await chat(true, 12, `${marker} streamed`);
    expect(streamed.status).toBe(200);
    expect(streamed.headers.get('content-type')).toContain('text/event-stream');
    const reader = new SseReader(streamed.body!);
    let content = '';
    let done = false;
    for (;;) {
      const event = await reader.nextEvent(15_000);
      if (event === null) break;
      if (event.data === '[DONE]') {
        done = true;
        continue;
      }
      const chunk = JSON.parse(event.data) as { error?: unknown; choices?: Array<{ delta?: { content?: string } }> };
      expect(chunk.error).toBeUndefined();
      content += chunk.choices?.[0]?.delta?.content ?? '';
    }
    expect(done).toBe(true);
    expect(content).toBe(expectedText(12));

    const plain = await chat(false, 7, `${marker} plain`);
    expect(plain.status).toBe(200);
    const body = (await plain.json()) as { choices: Array<{ message: { content: string } }>; model: string };
    expect(body.choices[0]!.message.content).toBe(expectedText(7));
    expect(body.model).toBe('sim-chat');
  }

  /** The node's environment to reach the control plane through the CONNECT proxy, with `uplink` mode. */
  const proxiedEnv = (uplink: 'auto' | 'off') => ({
    ...NO_PROXY_ENV,
    // undici reads the lower-case variables first: both spellings, whatever the test run's environment holds.
    HTTP_PROXY: proxyUrl,
    HTTPS_PROXY: proxyUrl,
    http_proxy: proxyUrl,
    https_proxy: proxyUrl,
    LUNANEXA_AGENT_UPLINK: uplink,
  });

  /** What the proxy carried for one node from its start on: the tunnels it opened and the bytes both ways. */
  const recordTunnels = () => {
    const from = tunnels.length;
    const seen = (traffic = { up: [], down: [] });
    return {
      stop() {
        traffic = null;
        return { opened: tunnels.slice(from), up: Buffer.concat(seen.up).toString('latin1'), down: Buffer.concat(seen.down).toString('latin1') };
      },
    };
  };

  /**
   * Serves a streamed and a plain chat on the node behind the proxy, whose tunnels `recording` records: both
   * directions went through them, and its uploads were of `kind` only.
   */
  async function servesThroughTunnels(name: string, kind: 'uplink' | 'invocation', recording: ReturnType<typeof recordTunnels>) {
    const marker = `MARKER-${name}-${randomUUID()}`;
    let seen: ReturnType<(typeof recording)['stop']>;
    try {
      await chatBothWays(name, marker);
    } finally {
      seen = recording.stop();
    }
    // At least two tunnels of its own, to the control plane: the stream holds one connection, uploads take another.
    expect(seen.opened.length).toBeGreaterThanOrEqual(2);
    expect(new Set(seen.opened)).toEqual(new Set([`127.0.0.1:${plane.port}`]));
    // The invokes (with the prompts) came down the agent's stream through them; the answers (the runtime's bytes,
    // as they are in the frames) went up through them.
    expect(seen.down).toContain(`${marker} streamed`);
    expect(seen.down).toContain(`${marker} plain`);
    expect(seen.up).toContain(`"content":"tok11 "`);
    expect(seen.up).toContain(expectedText(7));
    // The uploads themselves: the uplink, or one request per invocation, and never the other kind.
    const request = { uplink: 'POST /agent/v1/uplink ', invocation: 'POST /agent/v1/invocations/' };
    expect(seen.up).toContain(request[kind]);
    expect(seen.up).not.toContain(request[kind === 'uplink' ? 'invocation' : 'uplink']);
  }

  it('serves streamed and plain chat through the proxy up the uplink (uplink mode auto)', async () => {
    const name = 'proxied-auto';
    const env = proxiedEnv('auto');
    await onlyNode(name, { env });
    const before = await uploads();
    const recording = recordTunnels();
    const node = await runNodeWithDeployment(name, env);
    // Answers go up the uplink only once it is confirmed: before that, they go per invocation.
    await waitFor(async () => (await logOf(node)).includes(UPLINK_CONFIRMED), { timeoutMs: 10_000, what: 'uplink confirmed through the proxy' });

    await servesThroughTunnels(name, 'uplink', recording);
    const after = await uploads();
    expect(after.uplink - before.uplink).toBeGreaterThanOrEqual(1);
    expect(after.invocation - before.invocation).toBe(0);
    expect(await logOf(node)).not.toContain(UPLINK_FALLBACK);
  });

  /**
   * Neither node of these tests may open an uplink on the control plane: one never tries (`off`), the other's
   * stays in the buffering proxy. So they run side by side, the uplink count must not move, and each one's
   * per-invocation uploads are counted around its own requests.
   */
  describe('per-invocation uploads', () => {
    let router: HttpRouter;
    let before: { uplink: number; invocation: number };
    let recording: ReturnType<typeof recordTunnels>;
    let off: SimNode;
    let buffered: SimNode;

    beforeAll(async () => {
      // A proxy that buffers the uplink's body whole before forwarding it (it never ends), everything else streamed.
      router = await startHttpRouter({ route: () => plane.port, buffer: (path) => path.startsWith('/agent/v1/uplink') });
      await Promise.all([
        enrollNode('proxied-off', { env: proxiedEnv('off') }),
        enrollNode('buffered', { env: NO_PROXY_ENV, url: router.url }),
        stopSimNodes(nodes.splice(0)),
      ]);
      before = await uploads();
      // Only the node behind the CONNECT proxy uses it: every tunnel from here on is its own.
      recording = recordTunnels();
      [off, buffered] = await Promise.all([runNodeWithDeployment('proxied-off', proxiedEnv('off')), runNodeWithDeployment('buffered', NO_PROXY_ENV)]);
    }, 60_000);
    afterAll(async () => {
      await stopSimNodes(nodes.splice(0));
      await router?.close();
    });

    it('serves streamed and plain chat through the proxy by per-invocation uploads (uplink mode off)', async () => {
      const invocationsBefore = (await uploads()).invocation;
      await servesThroughTunnels('proxied-off', 'invocation', recording);
      const after = await uploads();
      expect(after.invocation - invocationsBefore).toBeGreaterThanOrEqual(2);
      expect(after.uplink - before.uplink).toBe(0);
      const log = await logOf(off);
      expect(log).not.toContain(UPLINK_CONFIRMED);
      expect(log).not.toContain(UPLINK_FALLBACK);
    });

    it('falls back to per-invocation uploads behind a proxy that buffers request bodies, and still serves streamed and plain chat', async () => {
      // The uplink opened and sits in the router, which waits for its body's end: never confirmed, given up.
      await waitFor(async () => (await logOf(buffered)).includes(UPLINK_FALLBACK), { timeoutMs: 10_000, what: 'the agent falling back' });
      // For want of a confirmation (not refused): the uplink reached the router and stayed there.
      expect(await logOf(buffered)).toMatch(/not confirmed within \d+ ms/);
      expect(router.seen.some((r) => r.method === 'POST' && r.path === '/agent/v1/uplink')).toBe(true);
      const framePosts = () => router.seen.filter((r) => r.method === 'POST' && /^\/agent\/v1\/invocations\/[^/]+\/frames$/.test(r.path)).length;
      const postsBefore = framePosts();
      const invocationsBefore = (await uploads()).invocation;

      await chatBothWays('buffered', `MARKER-buffered-${randomUUID()}`);

      // The answers went through the router, each on an upload of its own.
      expect(framePosts() - postsBefore).toBeGreaterThanOrEqual(2);
      const after = await uploads();
      expect(after.invocation - invocationsBefore).toBeGreaterThanOrEqual(2);
      // The buffered uplink never reached the control plane.
      expect(after.uplink - before.uplink).toBe(0);
      expect(await logOf(buffered)).not.toContain(UPLINK_CONFIRMED);
    });
  });
});
