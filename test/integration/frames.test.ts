import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Invoke } from '../../shared/contracts/relay.js';
import { FrameQueue, type QueueItem } from '../../functions/relay/frame-queue.js';
import { newId } from '../../shared/ids.js';
import { enrollTestMachine, type TestMachine } from '../helpers/machine.js';
import { startTestPlane, type TestPlane } from '../helpers/plane.js';

/**
 * POST/GET /agent/v1/invocations/{id}/frames against bad input: each answer is a 4xx in the agent API's
 * envelope, and nothing reaches the waiting request that should not. The invocation is dispatched through
 * the instance's real hub to machine A, whose stream is stood in for by a sink that records the invoke.
 */
describe('the frames upload refuses what it must', () => {
  let plane: TestPlane;
  let a: TestMachine;
  let b: TestMachine;
  const MAX = 64 * 1024;

  beforeAll(async () => {
    plane = await startTestPlane({ store: 'pglite', config: { framesMaxBytes: MAX } });
    a = await enrollTestMachine(plane, 'frames-a');
    b = await enrollTestMachine(plane, 'frames-b');
  }, 60_000);
  afterAll(async () => {
    await plane?.stop();
  });

  /** Dispatches a fresh invocation to A; returns its path and the queue the client side waits on. */
  async function dispatched(): Promise<{ path: string; queue: FrameQueue; detach: () => void }> {
    const hub = plane.ports.relay.hub;
    const invokes: Invoke[] = [];
    const detach = hub.attachStream(a.machineId, { invoke: (invoke) => invokes.push(invoke), cancel: () => {} });
    const invocationId = newId('invocation');
    const queue = new FrameQueue();
    await hub.dispatch(
      { invocationId, workloadId: newId('workload'), assignmentId: 'asg_test', path: '/v1/chat/completions', body: '{}', deadline: Date.now() + 60_000, idempotencyKey: null, stream: true },
      a.machineId,
      queue,
    );
    expect(invokes.map((i) => i.invocationId)).toEqual([invocationId]);
    return { path: `/agent/v1/invocations/${invocationId}/frames`, queue, detach };
  }

  async function upload(machine: TestMachine, path: string, body: string, headers: Record<string, string> = {}) {
    return await fetch(`${plane.url}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${await machine.sign('POST', path, '')}`, 'content-type': 'application/x-ndjson', ...headers },
      body,
    });
  }

  async function expectError(response: Response, status: number, code: string) {
    expect(response.status).toBe(status);
    const body = (await response.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe(code);
    expect(body.error.message.length).toBeGreaterThan(0);
  }

  /** Everything the waiting side has received so far (without waiting). */
  async function received(queue: FrameQueue): Promise<QueueItem[]> {
    const items: QueueItem[] = [];
    for (;;) {
      const item = await queue.next(AbortSignal.abort());
      if (!item) return items;
      items.push(item);
    }
  }

  it('accepts a well-formed upload, tells the next offset, and ignores a resent frame', async () => {
    const { path, queue, detach } = await dispatched();
    const head = JSON.stringify({ o: 0, t: 'head', status: 200, contentType: 'text/event-stream' });
    const data = JSON.stringify({ o: 1, t: 'data', d: 'data: {"x":1}\n\n' });
    const first = await upload(a, path, `\n${head}\n${data}\n`);
    expect(first.status).toBe(200);
    expect(await first.json()).toEqual({ nextOffset: 2 });
    const resume = await fetch(`${plane.url}${path}`, { headers: { authorization: `Bearer ${await a.sign('GET', path, '')}` } });
    expect(await resume.json()).toEqual({ nextOffset: 2 });
    // A resumed upload that repeats offset 1 adds only what is new.
    const end = JSON.stringify({ o: 2, t: 'end', tokens: 1 });
    expect((await upload(a, path, `${data}\n${end}`)).status).toBe(200);
    const frames = (await received(queue)).flatMap((item) => (item.kind === 'frames' ? item.frames : []));
    expect(frames.map((f) => f.o)).toEqual([0, 1, 2]);
    detach();
  });

  it("answers 403 forbidden_machine to a machine uploading another machine's invocation, and delivers nothing", async () => {
    const { path, queue, detach } = await dispatched();
    await expectError(await upload(b, path, `${JSON.stringify({ o: 0, t: 'head', status: 200, contentType: 'text/plain' })}\n`), 403, 'forbidden_machine');
    const resume = await fetch(`${plane.url}${path}`, { headers: { authorization: `Bearer ${await b.sign('GET', path, '')}` } });
    await expectError(resume, 403, 'forbidden_machine');
    expect((await received(queue)).every((item) => item.kind === 'frames' && item.frames.length === 0)).toBe(true);
    detach();
  });

  it('answers 404 to an upload for an unknown invocation', async () => {
    await expectError(await upload(a, `/agent/v1/invocations/${newId('invocation')}/frames`, '\n'), 404, 'not_found');
  });

  it('answers 400 invalid_json to a line that is not a frame, and never delivers it', async () => {
    const { path, queue, detach } = await dispatched();
    const head = JSON.stringify({ o: 0, t: 'head', status: 200, contentType: 'text/event-stream' });
    await expectError(await upload(a, path, `${head}\n{"o":1,"t":"data"}\n`), 400, 'invalid_json');
    await expectError(await upload(a, path, `${head}\nnot json\n`), 400, 'invalid_json');
    // A batch with a bad line is refused whole; lines of earlier batches (none here, or the head) may have gone.
    const frames = (await received(queue)).flatMap((item) => (item.kind === 'frames' ? item.frames : []));
    expect(frames.every((f) => f.t === 'head' && f.o === 0)).toBe(true);
    detach();
  });

  it('answers 413 to a body over the limit, declared or streamed', async () => {
    const { path, detach } = await dispatched();
    const big = `${JSON.stringify({ o: 0, t: 'data', d: 'x'.repeat(MAX) })}\n`;
    await expectError(await upload(a, path, big), 413, 'payload_too_large');
    // Chunked, with no declared length: refused once the bytes read pass the limit.
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        const bytes = new TextEncoder().encode(big);
        for (let at = 0; at < bytes.length; at += 8 * 1024) controller.enqueue(bytes.slice(at, at + 8 * 1024));
        controller.close();
      },
    });
    const chunked = await fetch(`${plane.url}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${await a.sign('POST', path, '')}`, 'content-type': 'application/x-ndjson' },
      body: stream,
      duplex: 'half',
    } as RequestInit);
    await expectError(chunked, 413, 'payload_too_large');
    detach();
  });

  it('answers 401 to an unsigned upload and to a token signed for another path', async () => {
    const { path, detach } = await dispatched();
    const unsigned = await fetch(`${plane.url}${path}`, { method: 'POST', body: '\n' });
    expect(unsigned.status).toBe(401);
    const other = await fetch(`${plane.url}${path}`, { method: 'POST', headers: { authorization: `Bearer ${await a.sign('POST', '/agent/v1/heartbeat', '')}` }, body: '\n' });
    await expectError(other, 401, 'invalid_machine_token');
    detach();
  });
});

/**
 * A single frame line is bounded (issue 7, finding 2): one line past `frameLineMaxBytes` (1 MiB) is refused as
 * soon as it passes the limit, without buffering the rest of the upload, and the plane keeps answering meanwhile.
 */
describe('a frame line over the line limit', () => {
  let plane: TestPlane;
  let a: TestMachine;
  beforeAll(async () => {
    // The default limits: a 16 MiB upload is well within the 256 MiB of one invocation.
    plane = await startTestPlane({ store: 'pglite' });
    a = await enrollTestMachine(plane, 'frames-line');
  }, 60_000);
  afterAll(async () => {
    await plane?.stop();
  });

  async function dispatched() {
    const hub = plane.ports.relay.hub;
    const detach = hub.attachStream(a.machineId, { invoke: () => {}, cancel: () => {} });
    const invocationId = newId('invocation');
    const queue = new FrameQueue();
    await hub.dispatch(
      { invocationId, workloadId: newId('workload'), assignmentId: 'asg_test', path: '/v1/chat/completions', body: '{}', deadline: Date.now() + 60_000, idempotencyKey: null, stream: true },
      a.machineId,
      queue,
    );
    return { path: `/agent/v1/invocations/${invocationId}/frames`, queue, detach };
  }

  /** Probes /healthz every 20 ms until stopped; the slowest answer, in ms. */
  function probeHealth() {
    let stopped = false;
    let slowest = 0;
    const loop = (async () => {
      while (!stopped) {
        const started = performance.now();
        expect((await fetch(`${plane.url}/healthz`)).status).toBe(200);
        slowest = Math.max(slowest, performance.now() - started);
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    return async () => {
      stopped = true;
      await loop;
      return slowest;
    };
  }

  for (const mode of ['declared', 'chunked'] as const) {
    it(`answers a 16 MiB line (${mode} length) with 413 at once, and /healthz stays prompt`, async () => {
      expect(plane.ports.config.frameLineMaxBytes).toBe(1024 * 1024);
      const { path, queue, detach } = await dispatched();
      const head = `${JSON.stringify({ o: 0, t: 'head', status: 200, contentType: 'text/event-stream' })}\n`;
      const line = `${JSON.stringify({ o: 1, t: 'data', d: 'x'.repeat(16 * 1024 * 1024) })}\n`;
      const bytes = new TextEncoder().encode(head + line);
      const stopProbe = probeHealth();
      const started = performance.now();
      const body =
        mode === 'declared'
          ? bytes
          : new ReadableStream<Uint8Array>({
              start(controller) {
                for (let at = 0; at < bytes.length; at += 64 * 1024) controller.enqueue(bytes.slice(at, at + 64 * 1024));
                controller.close();
              },
            });
      const response = await fetch(`${plane.url}${path}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${await a.sign('POST', path, '')}`, 'content-type': 'application/x-ndjson' },
        body,
        duplex: 'half',
      } as RequestInit);
      const elapsed = performance.now() - started;
      const slowest = await stopProbe();
      expect(response.status).toBe(413);
      const error = ((await response.json()) as { error: { code: string; message: string } }).error;
      expect(error.code).toBe('payload_too_large');
      expect(error.message).toContain('frame line');
      expect(elapsed).toBeLessThan(3_000);
      expect(slowest).toBeLessThan(500);
      // The head before the long line went through; nothing of the long line did.
      const frames = (await received(queue)).flatMap((item) => (item.kind === 'frames' ? item.frames : []));
      expect(frames.map((f) => f.t)).toEqual(['head']);
      // And the upload resumes where it stopped, with ordinary lines.
      const resume = `${JSON.stringify({ o: 1, t: 'data', d: 'short' })}\n${JSON.stringify({ o: 2, t: 'end', tokens: 1 })}\n`;
      const resumed = await fetch(`${plane.url}${path}`, { method: 'POST', headers: { authorization: `Bearer ${await a.sign('POST', path, '')}` }, body: resume });
      expect(resumed.status).toBe(200);
      expect(await resumed.json()).toEqual({ nextOffset: 3 });
      detach();
    });
  }

  it('accepts a line of exactly the limit', async () => {
    const { path, detach } = await dispatched();
    const frame = JSON.stringify({ o: 0, t: 'data', d: '' });
    const line = JSON.stringify({ o: 0, t: 'data', d: 'y'.repeat(plane.ports.config.frameLineMaxBytes - frame.length) });
    expect(Buffer.byteLength(line)).toBe(plane.ports.config.frameLineMaxBytes);
    const response = await fetch(`${plane.url}${path}`, { method: 'POST', headers: { authorization: `Bearer ${await a.sign('POST', path, '')}` }, body: `${line}\n` });
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ nextOffset: 1 });
    detach();
  });
});

/** Everything the waiting side has received so far (without waiting). */
async function received(queue: FrameQueue): Promise<QueueItem[]> {
  const items: QueueItem[] = [];
  for (;;) {
    const item = await queue.next(AbortSignal.abort());
    if (!item) return items;
    items.push(item);
  }
}
