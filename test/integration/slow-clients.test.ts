import { connect, type Socket } from 'node:net';
import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seedDemoDeployment, startSimNode, stopSimNodes, type SimNode } from '../../functions/hosts/dev/fleet.js';
import { workloads } from '../../functions/store/schema/index.js';
import { STEADY_LIVENESS, startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';
import { simStats } from '../chaos/nodes.js';
import { createTestDatabase, describePg } from '../helpers/pg.js';

/**
 * Security review 2, H1: a client that asks for a streamed answer and never reads must not make the control plane
 * hold the whole answer. A streamed answer is paced: the node sends at most a window ahead of what the client
 * took, so the node stops reading its runtime (and the simulator, which honours back-pressure, stops generating);
 * a client that takes nothing past the stall limit is cut with `client_too_slow`, the runtime call is cancelled,
 * and what was held is freed. The relay's bounds per invocation and per instance stay behind that for a node that
 * ignores its window. An answer that is not streamed is held whole, so it is bounded too (`answer_too_large`).
 */

const WINDOW = 64 * 1024;
/** Long enough that generation is seen to stop before the cut, on a loaded machine too (at 3 s, CI missed it once). */
const STALL_MS = 6_000;
const STREAM_BOUND = 256 * 1024;
const PLAIN_BOUND = 64 * 1024;
/** Far more than either bound: a 256k-token answer is tens of megabytes. */
const LONG_ANSWER = 262_144;

/** Sends a chat completion over a raw socket and never reads a byte of the answer. */
function nonReadingClient(plane: Pick<TestPlane, 'url'>, token: string, stream: boolean): Socket {
  const body = JSON.stringify({ model: 'sim-chat', messages: [{ role: 'user', content: 'tell me everything' }], max_tokens: LONG_ANSWER, stream });
  const socket = connect(Number(new URL(plane.url).port), '127.0.0.1');
  socket.pause();
  socket.write(
    `POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${token}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
  return socket;
}

describe('clients that do not read (H1)', () => {
  let plane: TestPlane;
  let node: SimNode;
  const sockets: Socket[] = [];

  beforeAll(async () => {
    plane = await startTestPlane({
      config: {
        relayWindowBytes: WINDOW,
        relayClientStallMs: STALL_MS,
        relayBufferMaxBytes: STREAM_BOUND,
        plainAnswerMaxBytes: PLAIN_BOUND,
        relayBuffersMaxBytes: 4 * STREAM_BOUND,
      },
    });
    await seedDemoDeployment(plane, 1, { tokensPerSecond: 0 });
    node = await startSimNode(plane, 'slow-clients-node', plane.dataDir);
    await waitFor(async () => plane.ports.dataPlane.routing.resolve(plane.workspaceId, 'sim-chat')?.replicas.length === 1, {
      timeoutMs: 30_000,
      what: 'sim-chat routable',
    });
  });
  afterAll(async () => {
    for (const socket of sockets) socket.destroy();
    await stopSimNodes([node]);
    await plane.stop();
  });

  const endedWith = async (code: string) => {
    await waitFor(async () => (await plane.ports.store.db.select({ id: workloads.id }).from(workloads).where(eq(workloads.errorCode, code))).length >= 1, {
      timeoutMs: 30_000,
      what: `a workload ended with ${code}`,
    });
    return await plane.ports.store.db.select().from(workloads).where(eq(workloads.errorCode, code));
  };

  it('holds a streamed answer a window ahead of a client that does not read, stops the runtime there, and cuts the client once it stalled', async () => {
    const before = await simStats(node);
    const startedAt = Date.now();
    sockets.push(nonReadingClient(plane, plane.adminToken, true));
    // Generation stops a window (plus what sockets buffer) into the answer, well before its end: the node reads
    // its runtime no further than the client lets it.
    const last = await generationPlateau(node, before.tokensStreamed, STALL_MS - 500);
    expect(last).toBeGreaterThan(0);
    // What did go out lies in the window and in the kernel's socket buffers (runtime to agent, plane to client:
    // a few MiB on loopback), not in the plane's memory (the peak below).
    expect(last).toBeLessThan(LONG_ANSWER / 2);
    // Not cut yet: the client is held back, not dropped, until it stalled past the limit.
    expect(await plane.ports.store.db.select({ id: workloads.id }).from(workloads).where(eq(workloads.errorCode, 'client_too_slow'))).toEqual([]);
    expect(plane.ports.dataPlane.budget.usage().peak).toBeLessThanOrEqual(WINDOW);
    const [cut] = await endedWith('client_too_slow');
    expect(cut).toMatchObject({ state: 'failed', errorCode: 'client_too_slow' });
    expect(Date.now() - startedAt).toBeGreaterThanOrEqual(STALL_MS);
    // The runtime call was cancelled, and nothing is left held.
    await waitFor(async () => (await simStats(node)).active === 0, { timeoutMs: 10_000, what: 'the runtime call to end' });
    expect((await simStats(node)).aborted).toBeGreaterThan(before.aborted);
    await waitFor(async () => plane.ports.dataPlane.budget.usage().held === 0, { timeoutMs: 10_000, what: 'the relay to hold nothing' });
  });

  it('refuses an answer that is not streamed once it passes the bound on what is held whole', async () => {
    const response = await fetch(`${plane.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${plane.adminToken}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-chat', messages: [{ role: 'user', content: 'tell me everything' }], max_tokens: LONG_ANSWER }),
    });
    expect(response.status).toBe(502);
    expect(((await response.json()) as { error: { code: string } }).error.code).toBe('answer_too_large');
    await waitFor(async () => plane.ports.dataPlane.budget.usage().held === 0, { timeoutMs: 10_000, what: 'the relay to hold nothing' });
  });

  it('holds at most its bound for many clients that never read, whatever their answers', async () => {
    for (let i = 0; i < 8; i++) sockets.push(nonReadingClient(plane, plane.adminToken, true));
    await waitFor(
      async () => (await plane.ports.store.db.select({ id: workloads.id }).from(workloads).where(eq(workloads.errorCode, 'client_too_slow'))).length >= 9,
      { timeoutMs: 60_000, what: 'nine clients cut' },
    );
    // A window each at most, far below the instance's bound.
    expect(plane.ports.dataPlane.budget.usage().peak).toBeLessThanOrEqual(8 * WINDOW);
    await waitFor(async () => plane.ports.dataPlane.budget.usage().held === 0, { timeoutMs: 10_000, what: 'the relay to hold nothing' });
  });
});

/** Tokens the node's runtimes generated once generation stopped (three equal readings in a row), since `from`. */
async function generationPlateau(node: SimNode, from: number, timeoutMs: number): Promise<number> {
  let last = -1;
  let plateau = 0;
  await waitFor(
    async () => {
      const now = (await simStats(node)).tokensStreamed - from;
      plateau = now > 0 && now === last ? plateau + 1 : 0;
      last = now;
      return plateau >= 3;
    },
    { timeoutMs, intervalMs: 200, what: 'generation to stop while the client does not read' },
  );
  return last;
}

describePg('a client that does not read, on another instance than the node stream (H1)', () => {
  let db: { url: string; drop(): Promise<void> };
  let planeA: TestPlane;
  let planeB: TestPlane;
  let node: SimNode;
  const sockets: Socket[] = [];

  beforeAll(async () => {
    db = await createTestDatabase();
    // A takes the client, B holds the node's stream: the answer crosses the peer channel from B to A.
    planeA = await startTestPlane({ store: 'pg', databaseUrl: db.url, config: { ...STEADY_LIVENESS, relayWindowBytes: WINDOW, relayClientStallMs: 60_000 } });
    planeB = await startTestPlane({ store: 'pg', databaseUrl: db.url, config: STEADY_LIVENESS });
    await seedDemoDeployment(planeB, 1, { tokensPerSecond: 0 });
    node = await startSimNode(planeB, 'slow-clients-peer-node', planeB.dataDir);
    await waitFor(async () => planeA.ports.dataPlane.routing.resolve(planeA.workspaceId, 'sim-chat')?.replicas.length === 1, {
      timeoutMs: 30_000,
      what: 'sim-chat routable on A',
    });
  }, 120_000);
  afterAll(async () => {
    for (const socket of sockets) socket.destroy();
    if (node) await stopSimNodes([node]);
    await planeA?.stop();
    await planeB?.stop();
    await db?.drop();
  });

  it("holds the node back through the peer channel: the client's instance holds a window and the runtime stops", async () => {
    const before = await simStats(node);
    sockets.push(nonReadingClient(planeA, planeA.adminToken, true));
    const generated = await generationPlateau(node, before.tokensStreamed, 20_000);
    // Kernel socket buffers on three hops (runtime to agent, B to A, A to the client) hold the rest: about 7 MB
    // on loopback here. A's memory holds about a window: without the pacing across the peer channel it held its
    // whole bound (8 MiB) and cut the client.
    expect(generated).toBeLessThan(LONG_ANSWER / 2);
    // A window, and at most one read of the peer connection that arrived as the queue filled (the reader checks
    // for room between reads: undici reads 64 KiB at most).
    expect(planeA.ports.dataPlane.budget.usage().peak).toBeLessThanOrEqual(WINDOW + 64 * 1024);
    // Held, not cut: the stall limit (a minute here) has not passed.
    expect((await simStats(node)).active).toBe(1);
    sockets.pop()?.destroy();
    await waitFor(async () => (await simStats(node)).active === 0, { timeoutMs: 10_000, what: 'the runtime call to end with its client' });
  });
});
