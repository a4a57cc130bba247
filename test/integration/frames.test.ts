import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Frame, Invoke } from '../../shared/contracts/relay.js';
import { concat, encodeFrame } from '../../shared/frame-codec.js';
import { FrameQueue } from '../../functions/link/frame-queue.js';
import type { StreamSink } from '../../functions/link/holder.js';
import { newId } from '../../shared/ids.js';
import { enrollTestMachine, type TestMachine } from '../helpers/machine.js';
import { startTestPlane, type TestPlane } from '../helpers/plane.js';
import { received } from '../helpers/frame-queue.js';

/**
 * POST/GET /agent/v1/invocations/{id}/frames, the per-invocation upload of an answer's binary frames
 * (shared/frame-codec.ts), well-formed and against bad input: each refusal is a 4xx in the agent API's envelope,
 * and nothing reaches the waiting request that should not. The invocation is dispatched through the instance's
 * real hub to machine A, whose stream is stood in for by a sink that records what the plane sends down it.
 */

/** A stand-in for a machine's stream: records what is sent down it. */
function recordingStream() {
  const invokes: Invoke[] = [];
  const sink: StreamSink = {
    invoke: (invoke) => invokes.push(invoke),
    cancel: () => {},
    ack: () => {},
    credit: () => {},
    confirmUplink: () => {},
    pong: () => {},
  };
  return { sink, invokes };
}

function invokeOf(invocationId: string): Invoke {
  return {
    invocationId,
    workloadId: newId('workload'),
    assignmentId: 'asg_test',
    path: '/v1/chat/completions',
    body: '{}',
    deadline: Date.now() + 60_000,
    idempotencyKey: null,
    stream: true,
  };
}

/** Dispatches a fresh invocation to `machine`, whose stream it stands in; its path, the waiting queue, a detach. */
async function dispatched(plane: TestPlane, machine: TestMachine): Promise<{ invocationId: string; path: string; queue: FrameQueue; detach: () => void }> {
  const hub = plane.ports.dataPlane.holder;
  const stream = recordingStream();
  const detach = hub.attachStream(machine.machineId, stream.sink);
  const invocationId = newId('invocation');
  const queue = new FrameQueue({ budget: null });
  await hub.dispatch(invokeOf(invocationId), machine.machineId, queue);
  expect(stream.invokes.map((i) => i.invocationId)).toEqual([invocationId]);
  return { invocationId, path: `/agent/v1/invocations/${invocationId}/frames`, queue, detach };
}

/** Bytes as a fetch body (TypeScript's DOM types want an ArrayBuffer-backed view; any Uint8Array works). */
function bytesBody(body: Uint8Array | ReadableStream<Uint8Array>): BodyInit {
  return body as BodyInit;
}

async function upload(
  plane: TestPlane,
  machine: TestMachine,
  path: string,
  body: Uint8Array | ReadableStream<Uint8Array>,
  headers: Record<string, string> = {},
): Promise<Response> {
  return await fetch(`${plane.url}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${await machine.sign('POST', path, '')}`, 'content-type': 'application/octet-stream', ...headers },
    body: bytesBody(body),
    duplex: 'half',
  } as RequestInit);
}

async function resumeOffset(plane: TestPlane, machine: TestMachine, path: string): Promise<Response> {
  return await fetch(`${plane.url}${path}`, { headers: { authorization: `Bearer ${await machine.sign('GET', path, '')}` } });
}

async function expectError(response: Response, status: number, code: string): Promise<{ code: string; message: string }> {
  expect(response.status).toBe(status);
  const body = (await response.json()) as { error: { code: string; message: string } };
  expect(body.error.code).toBe(code);
  expect(body.error.message.length).toBeGreaterThan(0);
  return body.error;
}

/** The bytes as a chunked body (no declared length), `size` bytes a chunk. */
function chunked(bytes: Uint8Array, size: number): ReadableStream<Uint8Array> {
  return new ReadableStream<Uint8Array>({
    start(controller) {
      for (let at = 0; at < bytes.length; at += size) controller.enqueue(bytes.slice(at, at + size));
      controller.close();
    },
  });
}

async function receivedFrames(queue: FrameQueue): Promise<Frame[]> {
  return (await received(queue)).flatMap((item) => (item.kind === 'frames' ? item.frames : []));
}

/** Comparable form: data bytes as text. */
function plain(frames: readonly Frame[]): unknown[] {
  return frames.map((f) => (f.t === 'data' ? { ...f, d: Buffer.from(f.d).toString('latin1') } : f));
}

const encoder = new TextEncoder();

describe('the frames upload', () => {
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

  it('accepts a well-formed upload, tells the next offset, and ignores a resent frame', async () => {
    const { invocationId, path, queue, detach } = await dispatched(plane, a);
    const accept: Frame = { o: 0, t: 'accept' };
    const head: Frame = { o: 1, t: 'head', status: 200, contentType: 'text/event-stream' };
    // Runtime bytes as they are: not UTF-8, NUL and newlines included.
    const data: Frame = { o: 2, t: 'data', d: new Uint8Array([...encoder.encode('data: {"x":1}\n\n'), 0x00, 0xff, 0x80]) };
    const first = await upload(plane, a, path, concat([accept, head, data].map((f) => encodeFrame(invocationId, f))));
    expect(first.status).toBe(200);
    expect(await first.json()).toEqual({ nextOffset: 3 });
    const resume = await resumeOffset(plane, a, path);
    expect(resume.status).toBe(200);
    expect(await resume.json()).toEqual({ nextOffset: 3 });
    // A resumed upload that repeats offsets 1 and 2 adds only what is new.
    const end: Frame = { o: 3, t: 'end', tokens: 1, promptTokens: 7, completionTokens: 1 };
    const second = await upload(plane, a, path, concat([head, data, end].map((f) => encodeFrame(invocationId, f))));
    expect(second.status).toBe(200);
    expect(await second.json()).toEqual({ nextOffset: 4 });
    expect(plain(await receivedFrames(queue))).toEqual(plain([accept, head, data, end]));
    // The end finished the invocation: it is unknown from then on.
    await expectError(await resumeOffset(plane, a, path), 404, 'not_found');
    detach();
  });

  it('delivers each frame as it arrives, the upload still open, and answers only when the body ends', async () => {
    const { invocationId, path, queue, detach } = await dispatched(plane, a);
    let controller!: ReadableStreamDefaultController<Uint8Array>;
    const body = new ReadableStream<Uint8Array>({ start: (c) => void (controller = c) });
    const answer = upload(plane, a, path, body);
    controller.enqueue(encodeFrame(invocationId, { o: 0, t: 'accept' }));
    const first = await queue.next(AbortSignal.timeout(5_000));
    expect(first).toEqual({ kind: 'frames', frames: [{ o: 0, t: 'accept' }] });
    controller.enqueue(encodeFrame(invocationId, { o: 1, t: 'end', tokens: 3, promptTokens: 5, completionTokens: null }));
    controller.close();
    expect(await (await answer).json()).toEqual({ nextOffset: 2 });
    expect(await receivedFrames(queue)).toEqual([{ o: 1, t: 'end', tokens: 3, promptTokens: 5, completionTokens: null }]);
    detach();
  });

  it("answers 403 forbidden_machine to a machine uploading another machine's invocation, and delivers nothing", async () => {
    const { invocationId, path, queue, detach } = await dispatched(plane, a);
    // B's own stream is held here too: the refusal is about whose invocation it is, not about B's link.
    const detachB = plane.ports.dataPlane.holder.attachStream(b.machineId, recordingStream().sink);
    const frames = concat([
      encodeFrame(invocationId, { o: 0, t: 'accept' }),
      encodeFrame(invocationId, { o: 1, t: 'head', status: 200, contentType: 'text/plain' }),
    ]);
    await expectError(await upload(plane, b, path, frames), 403, 'forbidden_machine');
    await expectError(await resumeOffset(plane, b, path), 403, 'forbidden_machine');
    expect(await received(queue)).toEqual([]);
    // A's upload of the same frames still starts from 0.
    expect(await (await resumeOffset(plane, a, path)).json()).toEqual({ nextOffset: 0 });
    detachB();
    detach();
  });

  it('answers 404 to an upload for an unknown invocation, and to its resume', async () => {
    const { detach } = await dispatched(plane, a);
    const unknown = newId('invocation');
    const path = `/agent/v1/invocations/${unknown}/frames`;
    await expectError(await upload(plane, a, path, encodeFrame(unknown, { o: 0, t: 'accept' })), 404, 'not_found');
    await expectError(await resumeOffset(plane, a, path), 404, 'not_found');
    detach();
  });

  it("answers 404 to frames of another invocation than the path's, and delivers nothing of them", async () => {
    const one = await dispatched(plane, a);
    const other = newId('invocation');
    await expectError(
      await upload(plane, a, one.path, concat([encodeFrame(one.invocationId, { o: 0, t: 'accept' }), encodeFrame(other, { o: 0, t: 'accept' })])),
      404,
      'not_found',
    );
    // The path's own frame before it went through; nothing else did.
    expect(await receivedFrames(one.queue)).toEqual([{ o: 0, t: 'accept' }]);
    one.detach();
  });

  it('answers 400 invalid_frames to bytes that are not frames, and never delivers them', async () => {
    const { invocationId, path, queue, detach } = await dispatched(plane, a);
    const accept = encodeFrame(invocationId, { o: 0, t: 'accept' });
    // Text: its first four bytes read as a length far over the limit.
    await expectError(await upload(plane, a, path, encoder.encode('{"o":0,"t":"accept"}\n')), 400, 'invalid_frames');
    // A frame of an unknown kind after a good one.
    const unknownKind = accept.slice();
    unknownKind[4] = 9;
    await expectError(await upload(plane, a, path, concat([accept, unknownKind])), 400, 'invalid_frames');
    // A frame whose length is shorter than its header.
    const short = new Uint8Array([0, 0, 0, 3, 1, 0, 0]);
    await expectError(await upload(plane, a, path, short), 400, 'invalid_frames');
    // An end frame whose body is neither its 12 bytes nor an older agent's 4.
    const badEnd = encodeFrame(invocationId, { o: 1, t: 'end', tokens: 1, promptTokens: 1, completionTokens: 1 }).slice(0, -1);
    new DataView(badEnd.buffer).setUint32(0, badEnd.length - 4);
    await expectError(await upload(plane, a, path, badEnd), 400, 'invalid_frames');
    // The accept that preceded the bad frame went through (it was whole); nothing of the bad bytes did.
    expect(await receivedFrames(queue)).toEqual([{ o: 0, t: 'accept' }]);
    expect(await (await resumeOffset(plane, a, path)).json()).toEqual({ nextOffset: 1 });
    detach();
  });

  it('answers 400 invalid_frames to an upload that ends inside a frame header, and never delivers it', async () => {
    const { invocationId, path, queue, detach } = await dispatched(plane, a);
    const accept = encodeFrame(invocationId, { o: 0, t: 'accept' });
    const head = encodeFrame(invocationId, { o: 1, t: 'head', status: 200, contentType: 'text/plain' });
    const response = await upload(plane, a, path, concat([accept, head.subarray(0, 7)]));
    expect(await receivedFrames(queue)).toEqual([{ o: 0, t: 'accept' }]);
    await expectError(response, 400, 'invalid_frames');
    detach();
  });

  it('answers 413 to a body over the limit, declared or streamed', async () => {
    const { invocationId, path, queue, detach } = await dispatched(plane, a);
    // Each frame under the 1 MiB frame limit: the body as a whole is what is over.
    const big = concat([encodeFrame(invocationId, { o: 0, t: 'accept' }), encodeFrame(invocationId, { o: 1, t: 'data', d: new Uint8Array(MAX).fill(0x78) })]);
    await expectError(await upload(plane, a, path, big), 413, 'payload_too_large');
    // Nothing was read of a body refused by its declared length.
    expect(await receivedFrames(queue)).toEqual([]);
    // Chunked, with no declared length: refused once the bytes read pass the limit.
    await expectError(await upload(plane, a, path, chunked(big, 8 * 1024)), 413, 'payload_too_large');
    const frames = await receivedFrames(queue);
    expect(frames.every((f) => f.t === 'accept')).toBe(true);
    detach();
  });

  it('answers 401 to an unsigned upload and to a token signed for another path', async () => {
    const { invocationId, path, queue, detach } = await dispatched(plane, a);
    const body = bytesBody(encodeFrame(invocationId, { o: 0, t: 'accept' }));
    const unsigned = await fetch(`${plane.url}${path}`, { method: 'POST', body });
    expect(unsigned.status).toBe(401);
    const other = await fetch(`${plane.url}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${await a.sign('POST', '/agent/v1/heartbeat', '')}` },
      body,
    });
    await expectError(other, 401, 'invalid_machine_token');
    // Signed for the frames of another invocation.
    const elsewhere = await fetch(`${plane.url}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${await a.sign('POST', `/agent/v1/invocations/${newId('invocation')}/frames`, '')}` },
      body,
    });
    await expectError(elsewhere, 401, 'invalid_machine_token');
    expect(await received(queue)).toEqual([]);
    detach();
  });
});

/**
 * A single frame is bounded (`frameMaxBytes`, 1 MiB): one whose length field is over it is refused from the length
 * field, without buffering the rest of the upload, and the plane keeps answering meanwhile.
 */
describe('a frame over the frame limit', () => {
  let plane: TestPlane;
  let a: TestMachine;
  beforeAll(async () => {
    // The default limits: a 16 MiB upload is well within the 256 MiB of one invocation.
    plane = await startTestPlane({ store: 'pglite' });
    a = await enrollTestMachine(plane, 'frames-huge');
  }, 60_000);
  afterAll(async () => {
    await plane?.stop();
  });

  /** Probes /healthz every 20 ms until stopped, each answer must be 200; the slowest answer, in ms. */
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

  /**
   * The bytes up to `sendBytes` as a chunked body that then stays open until `answered` settles: an answer that
   * arrives meanwhile was given without the rest of the upload, which is what a refusal from the length field means
   * (no clock involved).
   */
  function heldOpen(bytes: Uint8Array, sendBytes: number, answered: Promise<void>): ReadableStream<Uint8Array> {
    return new ReadableStream<Uint8Array>({
      async start(controller) {
        for (let at = 0; at < sendBytes; at += 64 * 1024) controller.enqueue(bytes.slice(at, Math.min(at + 64 * 1024, sendBytes)));
        await answered;
        controller.close();
      },
    });
  }

  for (const mode of ['declared', 'chunked'] as const) {
    it(`answers a 16 MiB frame (${mode} length) with 400 invalid_frames, refused from its length field, and /healthz keeps answering`, async () => {
      expect(plane.ports.config.frameMaxBytes).toBe(1024 * 1024);
      expect(plane.ports.config.framesMaxBytes).toBeGreaterThan(17 * 1024 * 1024);
      const { invocationId, path, queue, detach } = await dispatched(plane, a);
      const accept = encodeFrame(invocationId, { o: 0, t: 'accept' });
      const head = encodeFrame(invocationId, { o: 1, t: 'head', status: 200, contentType: 'text/event-stream' });
      const huge = encodeFrame(invocationId, { o: 2, t: 'data', d: new Uint8Array(16 * 1024 * 1024).fill(0x78) });
      const length = new DataView(huge.buffer).getUint32(0);
      expect(length).toBeGreaterThan(16 * 1024 * 1024);
      const bytes = concat([accept, head, huge]);
      const stopProbe = probeHealth();
      let response: Response;
      if (mode === 'declared') {
        response = await upload(plane, a, path, bytes);
      } else {
        // Only the first 64 KiB of the huge frame are sent before the answer must come.
        const sent = accept.length + head.length + 64 * 1024;
        let settle!: () => void;
        const answered = new Promise<void>((resolve) => (settle = resolve));
        response = await upload(plane, a, path, heldOpen(bytes, sent, answered)).finally(settle);
      }
      const slowest = await stopProbe();
      const error = await expectError(response, 400, 'invalid_frames');
      // Refused from its length field.
      expect(error.message).toContain(String(length));
      console.log(`${mode}: slowest /healthz during the refusal ${slowest.toFixed(0)} ms`);
      // The frames before the huge one went through; nothing of the huge one did.
      expect(await receivedFrames(queue)).toEqual([
        { o: 0, t: 'accept' },
        { o: 1, t: 'head', status: 200, contentType: 'text/event-stream' },
      ]);
      // And the upload resumes where it stopped, with ordinary frames.
      expect(await (await resumeOffset(plane, a, path)).json()).toEqual({ nextOffset: 2 });
      const rest = concat([
        encodeFrame(invocationId, { o: 2, t: 'data', d: encoder.encode('short') }),
        encodeFrame(invocationId, { o: 3, t: 'end', tokens: 1, promptTokens: null, completionTokens: null }),
      ]);
      const resumed = await upload(plane, a, path, rest);
      expect(resumed.status).toBe(200);
      expect(await resumed.json()).toEqual({ nextOffset: 4 });
      expect(plain(await receivedFrames(queue))).toEqual([
        { o: 2, t: 'data', d: 'short' },
        { o: 3, t: 'end', tokens: 1, promptTokens: null, completionTokens: null },
      ]);
      detach();
    });
  }

  it('accepts a frame of exactly the limit, and refuses one a byte longer', async () => {
    const { invocationId, path, queue, detach } = await dispatched(plane, a);
    const limit = plane.ports.config.frameMaxBytes;
    // The length field counts kind, id length, id, offset and body.
    const bodyBytes = limit - (1 + 1 + invocationId.length + 4);
    const exact = encodeFrame(invocationId, { o: 0, t: 'data', d: new Uint8Array(bodyBytes).fill(0x79) });
    expect(new DataView(exact.buffer).getUint32(0)).toBe(limit);
    const response = await upload(plane, a, path, exact);
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ nextOffset: 1 });
    const frames = await receivedFrames(queue);
    expect(frames).toHaveLength(1);
    expect(frames[0]!.t === 'data' && frames[0]!.d.length).toBe(bodyBytes);
    const over = encodeFrame(invocationId, { o: 1, t: 'data', d: new Uint8Array(bodyBytes + 1) });
    await expectError(await upload(plane, a, path, over), 400, 'invalid_frames');
    expect(await receivedFrames(queue)).toEqual([]);
    detach();
  });
});
