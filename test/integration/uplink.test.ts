import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Frame, Invoke } from '../../shared/contracts/relay.js';
import { concat, encodeControl, encodeFrame } from '../../shared/frame-codec.js';
import { FrameQueue } from '../../functions/link/frame-queue.js';
import type { StreamSink } from '../../functions/link/holder.js';
import { newId } from '../../shared/ids.js';
import { enrollTestMachine, type TestMachine } from '../helpers/machine.js';
import { startTestPlane, type TestPlane } from '../helpers/plane.js';
import { received } from '../helpers/frame-queue.js';

/**
 * POST /agent/v1/uplink, the machine's one long-lived upload of binary frames (shared/frame-codec.ts), against a
 * real plane: frames of several invocations interleaved reach each waiting request in order while the upload is
 * still open, the uplink's `hello` and `pong` go to the machine's stream, progress is acknowledged down the stream,
 * resent frames are dropped and lost ones fail their invocation; bad input is refused in the agent API's
 * envelope. The machine's stream is stood in for by a sink on the instance's real hub that records what the plane
 * sends down it.
 */

/** A stand-in for a machine's stream on the hub: records every call the plane makes on it. */
function recordingStream() {
  const invokes: Invoke[] = [];
  const cancels: { invocationId: string; reason: string }[] = [];
  const acks: { at: number; offsets: Record<string, number> }[] = [];
  const credits: Record<string, number>[] = [];
  const confirmed: string[] = [];
  let pongs = 0;
  const sink: StreamSink = {
    invoke: (invoke) => invokes.push(invoke),
    cancel: (invocationId, reason) => cancels.push({ invocationId, reason }),
    // Copied at once: the map is the caller's.
    ack: (offsets) => acks.push({ at: performance.now(), offsets: Object.fromEntries(offsets) }),
    credit: (totals) => credits.push(Object.fromEntries(totals)),
    confirmUplink: (uplinkId) => confirmed.push(uplinkId),
    pong: () => void (pongs += 1),
  };
  return {
    sink,
    invokes,
    cancels,
    acks,
    credits,
    confirmed,
    get pongs() {
      return pongs;
    },
    /** The latest credit of each invocation, over every credit event so far. */
    credited(): Record<string, number> {
      return Object.assign({}, ...credits) as Record<string, number>;
    },
    /** The latest acknowledged offset of each invocation, over every ack so far. */
    acked(): Record<string, number> {
      return Object.assign({}, ...acks.map((a) => a.offsets)) as Record<string, number>;
    },
  };
}
type RecordingStream = ReturnType<typeof recordingStream>;

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

type Outcome = { response: Response } | { error: unknown };

/** An uplink whose body stays open until `end()`: bytes go up as they are sent. */
interface OpenUplink {
  send(...frames: Uint8Array[]): void;
  end(): void;
  /** Settles when the plane answers or the connection breaks. */
  outcome: Promise<Outcome>;
}

/** Polls `check` every 5 ms until it is true; fails after `timeoutMs`. */
async function until(check: () => boolean, what: string, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** What settles first: `promise`, or `timeoutMs` (then `'pending'`). */
async function within<T>(promise: Promise<T>, timeoutMs: number): Promise<T | 'pending'> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<'pending'>((resolve) => (timer = setTimeout(() => resolve('pending'), timeoutMs)));
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Frames from `queue` until `count` of them or a failure arrived, or `timeoutMs` passed. */
async function collect(queue: FrameQueue, count: number, timeoutMs = 5_000): Promise<{ frames: Frame[]; failed: { code: string } | null }> {
  const frames: Frame[] = [];
  const signal = AbortSignal.timeout(timeoutMs);
  while (frames.length < count) {
    const item = await queue.next(signal);
    if (!item) break;
    if (item.kind === 'failed') return { frames, failed: item };
    frames.push(...item.frames);
  }
  return { frames, failed: null };
}

/** Comparable form: data bytes as hex. */
function plain(frames: readonly Frame[]): unknown[] {
  return frames.map((f) => (f.t === 'data' ? { ...f, d: Buffer.from(f.d).toString('hex') } : f));
}

async function expectError(response: Response, status: number, code: string): Promise<void> {
  expect(response.status).toBe(status);
  const body = (await response.json()) as { error: { code: string; message: string } };
  expect(body.error.code).toBe(code);
  expect(body.error.message.length).toBeGreaterThan(0);
}

describe('the uplink', () => {
  let plane: TestPlane;
  let a: TestMachine;
  let b: TestMachine;
  let streamless: TestMachine;
  const cleanups: (() => void)[] = [];

  beforeAll(async () => {
    plane = await startTestPlane({ store: 'pglite' });
    a = await enrollTestMachine(plane, 'uplink-a');
    b = await enrollTestMachine(plane, 'uplink-b');
    streamless = await enrollTestMachine(plane, 'uplink-streamless');
  }, 60_000);
  afterEach(() => {
    for (const cleanup of cleanups.splice(0)) cleanup();
  });
  afterAll(async () => {
    await plane?.stop();
  });

  /** Stands in `machine`'s stream on the hub until the test ends (or `detach`). */
  function attach(machine: TestMachine): RecordingStream & { detach: () => void } {
    const stream = recordingStream();
    const detach = plane.ports.dataPlane.holder.attachStream(machine.machineId, stream.sink);
    cleanups.push(detach);
    return Object.assign(stream, { detach });
  }

  /** Dispatches a fresh invocation to `machine` (whose stream must be attached); its id and waiting queue. */
  async function dispatch(machine: TestMachine, stream: RecordingStream): Promise<{ id: string; queue: FrameQueue }> {
    const id = newId('invocation');
    const queue = new FrameQueue({ budget: null });
    await plane.ports.dataPlane.holder.dispatch(invokeOf(id), machine.machineId, queue);
    expect(stream.invokes.at(-1)?.invocationId).toBe(id);
    cleanups.push(() => plane.ports.dataPlane.holder.release(id));
    return { id, queue };
  }

  async function headers(machine: TestMachine): Promise<Record<string, string>> {
    return { authorization: `Bearer ${await machine.sign('POST', '/agent/v1/uplink', '')}`, 'content-type': 'application/octet-stream' };
  }

  async function openUplink(machine: TestMachine): Promise<OpenUplink> {
    let controller!: ReadableStreamDefaultController<Uint8Array>;
    let closed = false;
    const body = new ReadableStream<Uint8Array>({
      start: (c) => void (controller = c),
      cancel: () => void (closed = true),
    });
    const outcome: Promise<Outcome> = fetch(`${plane.url}/agent/v1/uplink`, {
      method: 'POST',
      headers: await headers(machine),
      body,
      duplex: 'half',
    } as RequestInit).then(
      (response) => ({ response }),
      (error: unknown) => ({ error }),
    );
    cleanups.push(() => {
      if (!closed) {
        closed = true;
        controller.error(new Error('test over'));
      }
    });
    return {
      send(...frames) {
        if (!closed) controller.enqueue(concat(frames));
      },
      end() {
        if (closed) return;
        closed = true;
        controller.close();
      },
      outcome,
    };
  }

  /** An uplink sent whole, its body ended. */
  async function uplinkOnce(machine: TestMachine, bytes: Uint8Array, extra: Record<string, string> = {}): Promise<Response> {
    return await fetch(`${plane.url}/agent/v1/uplink`, { method: 'POST', headers: { ...(await headers(machine)), ...extra }, body: bytes as BodyInit });
  }

  async function closedCleanly(uplink: OpenUplink): Promise<void> {
    uplink.end();
    const outcome = await uplink.outcome;
    expect('response' in outcome).toBe(true);
    const { response } = outcome as { response: Response };
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ closed: true });
  }

  it('delivers frames of interleaved invocations in order while open, confirms its hello and acknowledges progress', async () => {
    const stream = attach(a);
    const one = await dispatch(a, stream);
    const two = await dispatch(a, stream);
    const uplink = await openUplink(a);
    uplink.send(encodeControl({ t: 'hello', uplinkId: 'upl_interleaved' }));
    await until(() => stream.confirmed.length > 0, 'the hello to be confirmed');
    expect(stream.confirmed).toEqual(['upl_interleaved']);

    const framesOne: Frame[] = [
      { o: 0, t: 'accept' },
      { o: 1, t: 'head', status: 200, contentType: 'text/event-stream' },
      { o: 2, t: 'data', d: new Uint8Array([0x64, 0x61, 0x74, 0x61, 0x3a, 0x20, 0xff, 0x00, 0x80, 0x0a, 0x0a]) },
      { o: 3, t: 'data', d: new TextEncoder().encode('data: [DONE]\n\n') },
      { o: 4, t: 'end', tokens: 7, promptTokens: 12, completionTokens: 7 },
    ];
    const framesTwo: Frame[] = [
      { o: 0, t: 'accept' },
      { o: 1, t: 'head', status: 200, contentType: 'application/json' },
      { o: 2, t: 'data', d: new Uint8Array(40_000).map((_, i) => i & 0xff) },
      { o: 3, t: 'error', code: 'runtime_failed', message: 'the runtime went away', told: true },
    ];
    // Interleaved: one, two, one, two, ...; cut into writes that fall inside frames.
    const interleaved = concat(
      [0, 1, 2, 3, 4].flatMap((i) => [framesOne[i], framesTwo[i]].flatMap((f, k) => (f ? [encodeFrame(k === 0 ? one.id : two.id, f)] : []))),
    );
    const firstHalf = Math.floor(interleaved.length / 2);
    const cuts = [0, 3, 17, 40, 1_000, firstHalf];
    for (let i = 0; i + 1 < cuts.length; i += 1) {
      uplink.send(interleaved.subarray(cuts[i], cuts[i + 1]));
      await new Promise((r) => setTimeout(r, 30));
    }
    uplink.send(interleaved.subarray(firstHalf));
    // Every frame reaches its request while the uplink is still open.
    const gotOne = await collect(one.queue, framesOne.length);
    const gotTwo = await collect(two.queue, framesTwo.length);
    expect(plain(gotOne.frames)).toEqual(plain(framesOne));
    expect(gotOne.failed).toBeNull();
    expect(plain(gotTwo.frames)).toEqual(plain(framesTwo));
    expect(gotTwo.failed).toBeNull();
    // Acknowledged down the stream, per invocation the next offset expected, while the uplink is open.
    await until(() => stream.acked()[one.id] === 5 && stream.acked()[two.id] === 4, 'the acks of both invocations');
    expect(stream.acked()).toEqual({ [one.id]: 5, [two.id]: 4 });
    expect(stream.acks.every((ack) => Object.keys(ack.offsets).length > 0)).toBe(true);
    // At most one ack every 50 ms (a timer may fire a millisecond early): several writes, fewer acks.
    for (let i = 1; i < stream.acks.length; i += 1) expect(stream.acks[i]!.at - stream.acks[i - 1]!.at).toBeGreaterThanOrEqual(45);
    // Offsets only grow, per invocation.
    for (const id of [one.id, two.id]) {
      const seen = stream.acks.flatMap((ack) => (id in ack.offsets ? [ack.offsets[id]!] : []));
      expect([...seen].sort((x, y) => x - y)).toEqual(seen);
    }
    // A pong on the uplink answers the stream's ping.
    uplink.send(encodeControl({ t: 'pong', seq: 3 }));
    await until(() => stream.pongs === 1, 'the pong');
    expect(stream.cancels).toEqual([]);
    await closedCleanly(uplink);
    expect(await received(one.queue)).toEqual([]);
    expect(await received(two.queue)).toEqual([]);
  });

  it('paces a windowed invocation: its window goes with the invoke, and credit follows what the consumer took, not what arrived', async () => {
    const stream = attach(a);
    const id = newId('invocation');
    const window = 64 * 1024;
    const queue = new FrameQueue({ budget: null, window });
    await plane.ports.dataPlane.holder.dispatch(invokeOf(id), a.machineId, queue);
    cleanups.push(() => plane.ports.dataPlane.holder.release(id));
    expect(stream.invokes.at(-1)).toMatchObject({ invocationId: id, window });
    const uplink = await openUplink(a);
    const piece = new Uint8Array(8 * 1024).fill(0x61);
    uplink.send(encodeFrame(id, { o: 0, t: 'accept' }), encodeFrame(id, { o: 1, t: 'head', status: 200, contentType: 'text/event-stream' }));
    for (let o = 2; o < 2 + 10; o += 1) uplink.send(encodeFrame(id, { o, t: 'data', d: piece }));
    await until(() => stream.acked()[id] === 12, 'the frames to arrive');
    // Arrived is not passed on: nothing is credited while the consumer has taken nothing.
    await new Promise((r) => setTimeout(r, 50));
    expect(stream.credits).toEqual([]);
    expect(queue.room()).not.toBeNull();
    const taken = await collect(queue, 12);
    expect(taken.frames.filter((f) => f.t === 'data')).toHaveLength(10);
    // Half a window or more owed is credited at once; the running total is what the consumer took.
    await until(() => stream.credited()[id] === 10 * piece.length, 'the credit');
    expect(stream.credits).toHaveLength(1);
    expect(queue.room()).toBeNull();
    // A little more is credited too, a moment later, with whatever else is owed.
    uplink.send(encodeFrame(id, { o: 12, t: 'data', d: piece.subarray(0, 100) }));
    await collect(queue, 1);
    await until(() => stream.credited()[id] === 10 * piece.length + 100, 'the small credit');
    await closedCleanly(uplink);
  });

  it('acknowledges a burst of many frames in few acks, never two within 50 ms', async () => {
    const stream = attach(a);
    const one = await dispatch(a, stream);
    const uplink = await openUplink(a);
    const started = performance.now();
    uplink.send(encodeFrame(one.id, { o: 0, t: 'accept' }));
    // One write per frame, as an agent writes them.
    for (let o = 1; o <= 200; o += 1) uplink.send(encodeFrame(one.id, { o, t: 'data', d: new Uint8Array([o & 0xff]) }));
    expect((await collect(one.queue, 201)).frames.map((f) => f.o)).toEqual(Array.from({ length: 201 }, (_, o) => o));
    await until(() => stream.acked()[one.id] === 201, 'the last ack');
    const last = stream.acks.at(-1)!.at;
    // The first ack waits its 50 ms, and so does each next one: k acks take at least about 50 k ms.
    expect(stream.acks.length).toBeGreaterThan(0);
    expect(stream.acks.length).toBeLessThanOrEqual(Math.floor((last - started) / 45));
    for (let i = 1; i < stream.acks.length; i += 1) expect(stream.acks[i]!.at - stream.acks[i - 1]!.at).toBeGreaterThanOrEqual(45);
    await closedCleanly(uplink);
  });

  it('drops frames resent on a second uplink: nothing is delivered twice', async () => {
    const stream = attach(a);
    const one = await dispatch(a, stream);
    const frames: Frame[] = [
      { o: 0, t: 'accept' },
      { o: 1, t: 'head', status: 200, contentType: 'text/event-stream' },
      { o: 2, t: 'data', d: new TextEncoder().encode('data: 1\n\n') },
      { o: 3, t: 'data', d: new TextEncoder().encode('data: 2\n\n') },
      { o: 4, t: 'end', tokens: 2, promptTokens: null, completionTokens: null },
    ];
    const first = await uplinkOnce(a, concat([encodeControl({ t: 'hello', uplinkId: 'upl_first' }), ...frames.slice(0, 3).map((f) => encodeFrame(one.id, f))]));
    expect(first.status).toBe(200);
    expect(await first.json()).toEqual({ closed: true });
    expect(plain((await collect(one.queue, 3)).frames)).toEqual(plain(frames.slice(0, 3)));
    await until(() => stream.acked()[one.id] === 3, "the first uplink's ack");
    // The agent resends from an older offset on a new uplink: only what is new goes through, and a duplicate
    // resent among the new frames (before the invocation ends) counts for nothing either.
    const second = await openUplink(a);
    const [, head, d1, d2, end] = frames.map((f) => encodeFrame(one.id, f));
    second.send(encodeControl({ t: 'hello', uplinkId: 'upl_second' }), head!, d1!, head!);
    await until(() => stream.confirmed.length === 2, 'the second hello');
    second.send(d2!, d1!, end!);
    await until(() => stream.acked()[one.id] === 5, "the second uplink's ack");
    await closedCleanly(second);
    expect(stream.confirmed).toEqual(['upl_first', 'upl_second']);
    expect(plain(await (await received(one.queue)).flatMap((item) => (item.kind === 'frames' ? item.frames : [])))).toEqual(plain(frames.slice(3)));
    expect(stream.cancels).toEqual([]);
  });

  it('fails an invocation whose frames have a gap with frames_lost', async () => {
    const stream = attach(a);
    const one = await dispatch(a, stream);
    const two = await dispatch(a, stream);
    const uplink = await openUplink(a);
    uplink.send(encodeFrame(one.id, { o: 0, t: 'accept' }), encodeFrame(one.id, { o: 2, t: 'data', d: new Uint8Array([1]) }));
    const got = await collect(one.queue, 2);
    expect(got.frames).toEqual([{ o: 0, t: 'accept' }]);
    expect(got.failed).toMatchObject({ kind: 'failed', code: 'frames_lost' });
    // The agent is told to stop the runtime call: nobody waits for it any more.
    await until(() => stream.cancels.length > 0, 'the cancel of the failed invocation');
    expect(stream.cancels.map((c) => c.invocationId)).toEqual([one.id]);
    // Later frames of it go nowhere; the uplink stays open for the others.
    uplink.send(encodeFrame(one.id, { o: 1, t: 'data', d: new Uint8Array([2]) }), encodeFrame(two.id, { o: 0, t: 'accept' }));
    expect((await collect(two.queue, 1)).frames).toEqual([{ o: 0, t: 'accept' }]);
    // Only the (standing) failure: no frame after it.
    expect(await received(one.queue)).toMatchObject([{ kind: 'failed', code: 'frames_lost' }]);
    await closedCleanly(uplink);
  });

  it('acknowledges frames of an unknown invocation, cancels it on the node once, and stays open', async () => {
    const stream = attach(a);
    const known = await dispatch(a, stream);
    const unknown = newId('invocation');
    const uplink = await openUplink(a);
    uplink.send(
      encodeControl({ t: 'hello', uplinkId: 'upl_unknown' }),
      encodeFrame(unknown, { o: 0, t: 'accept' }),
      encodeFrame(unknown, { o: 1, t: 'head', status: 200, contentType: 'text/plain' }),
    );
    await until(() => stream.cancels.length > 0, 'the cancel');
    await new Promise((r) => setTimeout(r, 30));
    uplink.send(
      encodeFrame(unknown, { o: 2, t: 'data', d: new Uint8Array([1, 2]) }),
      encodeFrame(unknown, { o: 3, t: 'end', tokens: 1, promptTokens: null, completionTokens: null }),
    );
    // Still open: a known invocation's frames go through on the same uplink.
    uplink.send(encodeFrame(known.id, { o: 0, t: 'accept' }));
    expect((await collect(known.queue, 1)).frames).toEqual([{ o: 0, t: 'accept' }]);
    // Acknowledged past its last frame, so the agent forgets it too.
    await until(() => stream.acked()[unknown] === 4 && stream.acked()[known.id] === 1, 'the acks');
    expect(stream.cancels).toEqual([{ invocationId: unknown, reason: 'unknown_invocation' }]);
    await closedCleanly(uplink);
    expect(stream.cancels).toHaveLength(1);
  });

  it('ends the uplink connection when the stream it is bound to detaches', async () => {
    const stream = attach(a);
    const one = await dispatch(a, stream);
    const uplink = await openUplink(a);
    uplink.send(encodeControl({ t: 'hello', uplinkId: 'upl_detach' }), encodeFrame(one.id, { o: 0, t: 'accept' }));
    await until(() => stream.confirmed.length > 0, 'the hello to be confirmed');
    expect((await collect(one.queue, 1)).frames).toEqual([{ o: 0, t: 'accept' }]);
    // Open while the stream lives.
    expect(await within(uplink.outcome, 200)).toBe('pending');
    stream.detach();
    const outcome = await within(uplink.outcome, 5_000);
    expect(outcome).not.toBe('pending');
    if (outcome !== 'pending' && 'response' in outcome) {
      // An answer instead of a broken connection is also an end; its body may be cut.
      await outcome.response.arrayBuffer().catch(() => {});
    }
    // What ran through the stream failed; nothing sent afterwards is delivered.
    expect(await collect(one.queue, 1, 1_000)).toMatchObject({ frames: [], failed: { code: 'node_lost' } });
    uplink.send(encodeFrame(one.id, { o: 1, t: 'end', tokens: 0, promptTokens: null, completionTokens: null }));
    await new Promise((r) => setTimeout(r, 50));
    expect(await received(one.queue)).toMatchObject([{ kind: 'failed', code: 'node_lost' }]);
  });

  it("answers 409 no_stream when no instance holds the machine's stream", async () => {
    expect(plane.ports.dataPlane.holder.hasLocalStream(streamless.machineId)).toBe(false);
    await expectError(await uplinkOnce(streamless, encodeControl({ t: 'hello', uplinkId: 'upl_nostream' })), 409, 'no_stream');
    // The same while its body is still open: refused without waiting for it to end.
    const uplink = await openUplink(streamless);
    uplink.send(encodeControl({ t: 'hello', uplinkId: 'upl_nostream_open' }));
    const outcome = await within(uplink.outcome, 5_000);
    expect(outcome !== 'pending' && 'response' in outcome).toBe(true);
    await expectError((outcome as { response: Response }).response, 409, 'no_stream');
    uplink.end();
  });

  it('answers 400 invalid_frames to bytes that are not frames, and delivers nothing of them', async () => {
    const stream = attach(a);
    const one = await dispatch(a, stream);
    await expectError(await uplinkOnce(a, new TextEncoder().encode(`{"o":0,"t":"accept","id":"${one.id}"}\n`)), 400, 'invalid_frames');
    // A control frame that names an invocation.
    const hello = encodeFrame(one.id, { o: 0, t: 'accept' });
    hello[4] = 16;
    await expectError(await uplinkOnce(a, hello), 400, 'invalid_frames');
    // An unknown kind.
    const unknownKind = encodeFrame(one.id, { o: 0, t: 'accept' });
    unknownKind[4] = 7;
    await expectError(await uplinkOnce(a, unknownKind), 400, 'invalid_frames');
    expect(await received(one.queue)).toEqual([]);
    expect(stream.confirmed).toEqual([]);
  });

  it("answers 403 forbidden_machine to frames of another machine's invocation, and delivers nothing", async () => {
    const streamA = attach(a);
    const streamB = attach(b);
    const ofA = await dispatch(a, streamA);
    const response = await uplinkOnce(
      b,
      concat([encodeFrame(ofA.id, { o: 0, t: 'accept' }), encodeFrame(ofA.id, { o: 1, t: 'end', tokens: 0, promptTokens: null, completionTokens: null })]),
    );
    await expectError(response, 403, 'forbidden_machine');
    expect(await received(ofA.queue)).toEqual([]);
    expect(streamB.cancels).toEqual([]);
    expect(streamA.cancels).toEqual([]);
    // A's own uplink still delivers them from offset 0.
    expect((await uplinkOnce(a, encodeFrame(ofA.id, { o: 0, t: 'accept' }))).status).toBe(200);
    expect((await collect(ofA.queue, 1)).frames).toEqual([{ o: 0, t: 'accept' }]);
  });

  it('answers 401 to an unsigned uplink and to one signed for another path', async () => {
    const stream = attach(a);
    const hello = encodeControl({ t: 'hello', uplinkId: 'upl_unsigned' }) as BodyInit;
    const unsigned = await fetch(`${plane.url}/agent/v1/uplink`, { method: 'POST', body: hello });
    expect(unsigned.status).toBe(401);
    const other = await fetch(`${plane.url}/agent/v1/uplink`, {
      method: 'POST',
      headers: { authorization: `Bearer ${await a.sign('POST', '/agent/v1/heartbeat', '')}` },
      body: hello,
    });
    await expectError(other, 401, 'invalid_machine_token');
    const get = await fetch(`${plane.url}/agent/v1/uplink`, {
      method: 'POST',
      headers: { authorization: `Bearer ${await a.sign('GET', '/agent/v1/uplink', '')}` },
      body: hello,
    });
    await expectError(get, 401, 'invalid_machine_token');
    expect(stream.confirmed).toEqual([]);
  });

  it('answers 400 invalid_frames to a frame over the frame limit, from its length field, the body still open', async () => {
    expect(plane.ports.config.frameMaxBytes).toBe(1024 * 1024);
    const stream = attach(a);
    const one = await dispatch(a, stream);
    const uplink = await openUplink(a);
    const huge = encodeFrame(one.id, { o: 1, t: 'data', d: new Uint8Array(16 * 1024 * 1024) });
    uplink.send(encodeFrame(one.id, { o: 0, t: 'accept' }), huge.subarray(0, 64 * 1024));
    const outcome = await within(uplink.outcome, 3_000);
    expect(outcome !== 'pending' && 'response' in outcome).toBe(true);
    await expectError((outcome as { response: Response }).response, 400, 'invalid_frames');
    uplink.end();
    expect((await collect(one.queue, 2, 500)).frames).toEqual([{ o: 0, t: 'accept' }]);
  });

  it('answers 400 invalid_frames to a frame over the limit whose length field arrives in two writes', async () => {
    const stream = attach(a);
    const one = await dispatch(a, stream);
    const uplink = await openUplink(a);
    const header = new Uint8Array(4);
    new DataView(header.buffer).setUint32(0, 0xfffffff0);
    uplink.send(encodeFrame(one.id, { o: 0, t: 'accept' }), header.subarray(0, 2));
    await new Promise((r) => setTimeout(r, 150));
    uplink.send(header.subarray(2));
    await new Promise((r) => setTimeout(r, 50));
    for (let i = 0; i < 32; i += 1) uplink.send(new Uint8Array(64 * 1024));
    const outcome = await within(uplink.outcome, 3_000);
    uplink.end();
    expect(outcome !== 'pending' && 'response' in outcome).toBe(true);
    await expectError((outcome as { response: Response }).response, 400, 'invalid_frames');
  });
});
