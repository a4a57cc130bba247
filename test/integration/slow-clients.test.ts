import { connect, type Socket } from 'node:net';
import { eq } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seedDemoDeployment, startSimNode, stopSimNodes, type SimNode } from '../../functions/hosts/dev/fleet.js';
import { workloads } from '../../functions/store/schema/index.js';
import { startTestPlane, waitFor, type TestPlane } from '../helpers/plane.js';

/**
 * Security review 2, H1: a client that asks for a streamed answer and never reads must not make the control plane
 * hold the whole answer. The relay keeps a bounded buffer per invocation and per instance: a client that stays
 * behind past it is cut with `client_too_slow`, the runtime call is cancelled, and what was held is freed. An
 * answer that is not streamed is held whole, so it is bounded too (`answer_too_large`).
 */

const STREAM_BOUND = 256 * 1024;
const PLAIN_BOUND = 64 * 1024;
/** Far more than either bound: a 256k-token answer is tens of megabytes. */
const LONG_ANSWER = 262_144;

/** Sends a chat completion over a raw socket and never reads a byte of the answer. */
function nonReadingClient(plane: TestPlane, token: string, stream: boolean): Socket {
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
    plane = await startTestPlane({ config: { relayBufferMaxBytes: STREAM_BOUND, plainAnswerMaxBytes: PLAIN_BOUND, relayBuffersMaxBytes: 4 * STREAM_BOUND } });
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

  it('cuts a streamed answer its client does not read once the relay holds its bound, and frees what it held', async () => {
    sockets.push(nonReadingClient(plane, plane.adminToken, true));
    const [cut] = await endedWith('client_too_slow');
    expect(cut).toMatchObject({ state: 'failed', errorCode: 'client_too_slow' });
    const budget = plane.ports.dataPlane.budget.usage();
    // Never more than the instance's bound, and nothing left held once the answer is over.
    expect(budget.peak).toBeLessThanOrEqual(4 * STREAM_BOUND);
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
    expect(plane.ports.dataPlane.budget.usage().peak).toBeLessThanOrEqual(4 * STREAM_BOUND);
    await waitFor(async () => plane.ports.dataPlane.budget.usage().held === 0, { timeoutMs: 10_000, what: 'the relay to hold nothing' });
  });
});
