import { describe, expect, it } from 'vitest';
import type { Frame } from '../../shared/contracts/relay.js';
import { concat, encodeControl, encodeFrame, FrameDecoder, FrameError, MAX_FRAME_BYTES, type UplinkControl } from '../../shared/frame-codec.js';

/**
 * The binary frames of the uplink and of the per-invocation upload (shared/frame-codec.ts): what is encoded is
 * decoded back whatever the chunking, data is handed over as a view of the chunk when its frame lies in one, and
 * anything that is not a frame of the protocol is a `FrameError`.
 */

type Decoded = { id: string; frame: Frame } | { control: UplinkControl };

/** A decoder that records what it decodes, in order. */
function recorder(maxFrameBytes?: number) {
  const out: Decoded[] = [];
  const decoder = new FrameDecoder(
    {
      frame: (id, frame) => out.push({ id, frame }),
      control: (control) => out.push({ control }),
    },
    maxFrameBytes,
  );
  return { decoder, out };
}

/** Comparable form: data bytes as hex (a view and a copy of the same bytes compare equal). */
function plain(decoded: readonly Decoded[]): unknown[] {
  return decoded.map((d) => ('frame' in d && d.frame.t === 'data' ? { id: d.id, frame: { ...d.frame, d: Buffer.from(d.frame.d).toString('hex') } } : d));
}

function decodeAll(chunks: readonly Uint8Array[], maxFrameBytes?: number): { out: Decoded[]; buffered: number } {
  const { decoder, out } = recorder(maxFrameBytes);
  for (const chunk of chunks) decoder.push(chunk);
  return { out, buffered: decoder.buffered };
}

/** Bytes that are not valid UTF-8 (lone continuation bytes, an overlong form, 0xff), NUL and CR/LF among them. */
const BINARY = new Uint8Array([0x00, 0xff, 0xfe, 0x80, 0xbf, 0xc0, 0xaf, 0x0a, 0x0d, 0xed, 0xa0, 0x80, 0x7f, 0x00]);

/** A byte header: u32 length of the rest, u8 kind, u8 id length, id, u32 offset, then `body`. */
function rawFrame(kind: number, id: string, offset: number, body: Uint8Array = new Uint8Array(0), lengthField?: number): Uint8Array {
  const bytes = new Uint8Array(4 + 1 + 1 + id.length + 4 + body.length);
  const view = new DataView(bytes.buffer);
  view.setUint32(0, lengthField ?? bytes.length - 4);
  bytes[4] = kind;
  bytes[5] = id.length;
  for (let i = 0; i < id.length; i += 1) bytes[6 + i] = id.charCodeAt(i);
  view.setUint32(6 + id.length, offset);
  bytes.set(body, 10 + id.length);
  return bytes;
}

describe('frame codec round trips', () => {
  const ID = 'inv_01JROUNDTRIP0000000000000';
  const frames: Frame[] = [
    { o: 0, t: 'accept' },
    { o: 1, t: 'head', status: 200, contentType: 'text/event-stream; charset=utf-8' },
    { o: 1, t: 'head', status: 503, contentType: '' },
    { o: 2, t: 'data', d: BINARY },
    { o: 3, t: 'data', d: new Uint8Array(0) },
    { o: 4, t: 'data', d: new TextEncoder().encode('data: {"choices":[{"delta":{"content":"héllo ✓"}}]}\n\n') },
    { o: 5, t: 'end', tokens: 0, promptTokens: null, completionTokens: null },
    { o: 5, t: 'end', tokens: 0xffffffff, promptTokens: 0, completionTokens: 0xfffffffe },
    { o: 5, t: 'end', tokens: 12, promptTokens: 31, completionTokens: null },
    { o: 5, t: 'end', tokens: 0, promptTokens: null, completionTokens: 9 },
    { o: 6, t: 'error', code: 'runtime_failed', message: 'the runtime answered 500: ünïcode ✗', told: true },
    { o: 7, t: 'error', code: 'deadline', message: '' },
    { o: 0xffffffff, t: 'accept' },
  ];

  for (const frame of frames) {
    it(`round-trips ${frame.t} at offset ${frame.o}${frame.t === 'error' && frame.told ? ' (told)' : ''}`, () => {
      const bytes = encodeFrame(ID, frame);
      // The length field covers exactly the rest of the frame.
      expect(new DataView(bytes.buffer, bytes.byteOffset).getUint32(0)).toBe(bytes.length - 4);
      const { out, buffered } = decodeAll([bytes]);
      expect(buffered).toBe(0);
      expect(plain(out)).toEqual(plain([{ id: ID, frame }]));
    });
  }

  it('keeps `told` absent on an error frame that was not told (not `told: false`)', () => {
    const { out } = decodeAll([encodeFrame(ID, { o: 1, t: 'error', code: 'x', message: 'y' })]);
    expect(out).toHaveLength(1);
    const decoded = out[0] as { frame: Frame };
    expect(decoded.frame).toEqual({ o: 1, t: 'error', code: 'x', message: 'y' });
    expect('told' in decoded.frame).toBe(false);
  });

  it("carries an end frame's usage in 12 bytes, an unknown count as 0xFFFFFFFF", () => {
    const bytes = encodeFrame('inv_x', { o: 2, t: 'end', tokens: 5, promptTokens: 7, completionTokens: null });
    const body = new DataView(bytes.buffer, bytes.byteOffset + 10 + 'inv_x'.length);
    expect(body.byteLength).toBe(12);
    expect([body.getUint32(0), body.getUint32(4), body.getUint32(8)]).toEqual([5, 7, 0xffffffff]);
  });

  it('writes an end frame without usage in the 4 bytes of agents and control planes that predate usage', () => {
    const bytes = encodeFrame('inv_x', { o: 2, t: 'end', tokens: 5, promptTokens: null, completionTokens: null });
    expect(bytes.length - 10 - 'inv_x'.length).toBe(4);
    expect(new DataView(bytes.buffer, bytes.byteOffset + 10 + 'inv_x'.length).getUint32(0)).toBe(5);
  });

  it('decodes the 4-byte end frame of an agent older than usage as tokens with usage unknown', () => {
    const body = new Uint8Array(4);
    new DataView(body.buffer).setUint32(0, 17);
    expect(decodeAll([rawFrame(4, 'inv_old', 3, body)]).out).toEqual([
      { id: 'inv_old', frame: { o: 3, t: 'end', tokens: 17, promptTokens: null, completionTokens: null } },
    ]);
  });

  it('carries data bytes untouched, every byte value', () => {
    const all = new Uint8Array(256 * 3).map((_, i) => (i * 7 + 3) & 0xff);
    const { out } = decodeAll([encodeFrame(ID, { o: 9, t: 'data', d: all })]);
    const frame = (out[0] as { frame: Frame }).frame;
    expect(frame.t).toBe('data');
    expect(Array.from((frame as { d: Uint8Array }).d)).toEqual(Array.from(all));
  });

  it('round-trips hello (with a non-ASCII id) and pong (its sequence number in the offset field)', () => {
    const controls: UplinkControl[] = [
      { t: 'hello', uplinkId: 'upl_01JHELLO' },
      { t: 'hello', uplinkId: 'üplink-ünïcode' },
      { t: 'pong', seq: 0 },
      { t: 'pong', seq: 41 },
      { t: 'pong', seq: 0xffffffff },
    ];
    for (const control of controls) {
      const bytes = encodeControl(control);
      expect(bytes[5]).toBe(0); // control frames name no invocation
      expect(decodeAll([bytes]).out).toEqual([{ control }]);
    }
  });

  it('keeps the invocation id of each frame apart', () => {
    const { out } = decodeAll([
      concat([encodeFrame('inv_a', { o: 0, t: 'accept' }), encodeFrame('inv_bb', { o: 0, t: 'accept' }), encodeFrame('x'.repeat(255), { o: 3, t: 'accept' })]),
    ]);
    expect(out).toEqual([
      { id: 'inv_a', frame: { o: 0, t: 'accept' } },
      { id: 'inv_bb', frame: { o: 0, t: 'accept' } },
      { id: 'x'.repeat(255), frame: { o: 3, t: 'accept' } },
    ]);
  });

  it('refuses to encode an id of more than 255 characters', () => {
    expect(() => encodeFrame('x'.repeat(256), { o: 0, t: 'accept' })).toThrow(FrameError);
  });
});

describe('frame decoding across chunk splits', () => {
  const items: Decoded[] = [
    { control: { t: 'hello', uplinkId: 'upl_split' } },
    { id: 'inv_one', frame: { o: 0, t: 'accept' } },
    { id: 'inv_two', frame: { o: 0, t: 'accept' } },
    { id: 'inv_one', frame: { o: 1, t: 'head', status: 200, contentType: 'text/event-stream' } },
    { id: 'inv_one', frame: { o: 2, t: 'data', d: BINARY } },
    { control: { t: 'pong', seq: 7 } },
    { id: 'inv_two', frame: { o: 1, t: 'head', status: 400, contentType: 'application/json' } },
    { id: 'inv_two', frame: { o: 2, t: 'error', code: 'bad_request', message: 'nope ✗', told: true } },
    { id: 'inv_one', frame: { o: 3, t: 'data', d: new Uint8Array(0) } },
    { id: 'inv_one', frame: { o: 4, t: 'end', tokens: 12, promptTokens: 40, completionTokens: 11 } },
  ];
  const buffer = concat(items.map((item) => ('control' in item ? encodeControl(item.control) : encodeFrame(item.id, item.frame))));
  const expected = plain(items);

  it('decodes the buffer whole', () => {
    const { out, buffered } = decodeAll([buffer]);
    expect(plain(out)).toEqual(expected);
    expect(buffered).toBe(0);
  });

  it('decodes it fed byte by byte', () => {
    const { decoder, out } = recorder();
    for (let i = 0; i < buffer.length; i += 1) decoder.push(buffer.subarray(i, i + 1));
    expect(plain(out)).toEqual(expected);
    expect(decoder.buffered).toBe(0);
  });

  it('decodes it cut at every single point', () => {
    for (let i = 0; i <= buffer.length; i += 1) {
      const { out, buffered } = decodeAll([buffer.slice(0, i), buffer.slice(i)]);
      expect(plain(out), `cut at ${i}`).toEqual(expected);
      expect(buffered).toBe(0);
    }
  });

  it('decodes it cut at every pair of points (three chunks, empty ones included)', () => {
    for (let i = 0; i <= buffer.length; i += 1) {
      for (let j = i; j <= buffer.length; j += 1) {
        const { out, buffered } = decodeAll([buffer.slice(0, i), buffer.slice(i, j), buffer.slice(j)]);
        // Not `expect` per case: tens of thousands of cases.
        if (buffered !== 0 || JSON.stringify(plain(out)) !== JSON.stringify(expected))
          expect({ i, j, out: plain(out), buffered }).toEqual({ i, j, out: expected, buffered: 0 });
      }
    }
  });

  it('holds an incomplete frame back until it is whole, and says how much it holds', () => {
    const { decoder, out } = recorder();
    const first = encodeFrame('inv_one', { o: 0, t: 'data', d: BINARY });
    decoder.push(first.subarray(0, first.length - 1));
    expect(out).toEqual([]);
    expect(decoder.buffered).toBe(first.length - 1);
    decoder.push(first.subarray(first.length - 1));
    expect(out).toHaveLength(1);
    expect(decoder.buffered).toBe(0);
  });

  it('hands over data that arrived split as its own bytes, unchanged when the chunks are reused', () => {
    const frame = encodeFrame('inv_one', { o: 0, t: 'data', d: BINARY });
    const a = frame.slice(0, 15);
    const b = frame.slice(15);
    const { decoder, out } = recorder();
    decoder.push(a);
    decoder.push(b);
    a.fill(0x55);
    b.fill(0x55);
    expect(Array.from((out[0] as { frame: { d: Uint8Array } }).frame.d)).toEqual(Array.from(BINARY));
  });
});

describe('data without copies', () => {
  it('hands over the data of a frame lying in one chunk as a view of that chunk', () => {
    const first = encodeFrame('inv_view', { o: 0, t: 'head', status: 200, contentType: 'text/plain' });
    const second = encodeFrame('inv_view', { o: 1, t: 'data', d: BINARY });
    const third = encodeFrame('inv_view', { o: 2, t: 'data', d: new Uint8Array([1, 2, 3]) });
    // A chunk that is itself a view into a larger buffer, at an odd offset.
    const backing = new Uint8Array(7 + first.length + second.length + third.length + 5);
    const chunk = backing.subarray(7, 7 + first.length + second.length + third.length);
    chunk.set(first, 0);
    chunk.set(second, first.length);
    chunk.set(third, first.length + second.length);
    const { decoder, out } = recorder();
    decoder.push(chunk);
    const data = out.flatMap((d) => ('frame' in d && d.frame.t === 'data' ? [d.frame.d] : []));
    expect(data).toHaveLength(2);
    // Same memory: the data body starts after the 10-byte header and the id.
    const headerBytes = 10 + 'inv_view'.length;
    expect(data[0]!.buffer).toBe(backing.buffer);
    expect(data[0]!.byteOffset).toBe(chunk.byteOffset + first.length + headerBytes);
    expect(data[0]!.length).toBe(BINARY.length);
    expect(data[1]!.buffer).toBe(backing.buffer);
    expect(data[1]!.byteOffset).toBe(chunk.byteOffset + first.length + second.length + headerBytes);
    // A write to the chunk shows through: a view, not a copy.
    chunk[first.length + headerBytes] = 0x42;
    expect(data[0]![0]).toBe(0x42);
  });

  it('hands over the data of a frame lying in one chunk as a view even after a frame that was split', () => {
    // The documented contract (shared/frame-codec.ts, FrameDecoder): "A frame that lies inside one chunk is read in
    // place (its data is a view of the chunk, not a copy)". After an upload's chunking once falls inside a frame
    // (the usual case on a stream: network chunks do not follow frame boundaries), every later chunk starts with
    // the tail of a frame.
    const split = encodeFrame('inv_view', { o: 0, t: 'data', d: BINARY });
    const whole = encodeFrame('inv_view', { o: 1, t: 'data', d: new Uint8Array([9, 8, 7, 6]) });
    const second = new Uint8Array(split.length - 5 + whole.length);
    second.set(split.subarray(5), 0);
    second.set(whole, split.length - 5);
    const { decoder, out } = recorder();
    decoder.push(split.slice(0, 5));
    decoder.push(second);
    const data = out.flatMap((d) => ('frame' in d && d.frame.t === 'data' ? [d.frame.d] : []));
    expect(data.map((d) => Array.from(d))).toEqual([Array.from(BINARY), [9, 8, 7, 6]]);
    expect(data[1]!.buffer).toBe(second.buffer);
  });
});

describe('frame decoding refuses what is not a frame', () => {
  function refused(chunks: readonly Uint8Array[], maxFrameBytes?: number): { error: unknown; out: Decoded[] } {
    const { decoder, out } = recorder(maxFrameBytes);
    try {
      for (const chunk of chunks) decoder.push(chunk);
    } catch (error) {
      return { error, out };
    }
    return { error: null, out };
  }

  it('refuses an unknown invocation frame kind, and an unknown control kind', () => {
    for (const kind of [0, 6, 15]) {
      const { error, out } = refused([rawFrame(kind, 'inv_x', 0)]);
      expect(error, `kind ${kind}`).toBeInstanceOf(FrameError);
      expect((error as Error).message).toContain(`unknown frame kind ${kind}`);
      expect(out).toEqual([]);
    }
    for (const kind of [18, 255]) {
      const { error } = refused([rawFrame(kind, '', 0)]);
      expect(error, `kind ${kind}`).toBeInstanceOf(FrameError);
      expect((error as Error).message).toContain(`unknown frame kind ${kind}`);
    }
  });

  it('delivers the frames before a bad one, then refuses', () => {
    const { error, out } = refused([concat([encodeFrame('inv_x', { o: 0, t: 'accept' }), rawFrame(9, 'inv_x', 1)])]);
    expect(error).toBeInstanceOf(FrameError);
    expect(out).toEqual([{ id: 'inv_x', frame: { o: 0, t: 'accept' } }]);
  });

  it('accepts a frame of exactly the limit and refuses one byte more', () => {
    const limit = 64;
    const idBytes = 'inv_x'.length;
    const fits = encodeFrame('inv_x', { o: 0, t: 'data', d: new Uint8Array(limit - 6 - idBytes) });
    expect(new DataView(fits.buffer).getUint32(0)).toBe(limit);
    expect(decodeAll([fits], limit).out).toHaveLength(1);
    const over = encodeFrame('inv_x', { o: 0, t: 'data', d: new Uint8Array(limit - 6 - idBytes + 1) });
    expect(refused([over], limit).error).toBeInstanceOf(FrameError);
  });

  it('defaults to MAX_FRAME_BYTES (1 MiB)', () => {
    expect(MAX_FRAME_BYTES).toBe(1024 * 1024);
    const header = new Uint8Array(4);
    new DataView(header.buffer).setUint32(0, MAX_FRAME_BYTES + 1);
    expect(refused([header]).error).toBeInstanceOf(FrameError);
    new DataView(header.buffer).setUint32(0, MAX_FRAME_BYTES);
    expect(refused([header]).error).toBeNull();
  });

  it('refuses a length over the limit from the length field alone, before the body arrives', () => {
    const header = new Uint8Array(4);
    new DataView(header.buffer).setUint32(0, 16 * 1024 * 1024);
    const { error } = refused([header]);
    expect(error).toBeInstanceOf(FrameError);
    expect((error as Error).message).toContain(String(16 * 1024 * 1024));
    // Also behind a complete frame in the same chunk, and when the length field starts a later chunk.
    expect(refused([concat([encodeFrame('inv_x', { o: 0, t: 'accept' }), header])]).error).toBeInstanceOf(FrameError);
    expect(refused([encodeFrame('inv_x', { o: 0, t: 'accept' }), header]).error).toBeInstanceOf(FrameError);
    // And when a frame was pending before the length field: the limit holds from the length field on.
    const accept = encodeFrame('inv_x', { o: 0, t: 'accept' });
    expect(refused([accept.subarray(0, 3), concat([accept.subarray(3), header])]).error).toBeInstanceOf(FrameError);
  });

  it('refuses a length over the limit whose length field arrives split across chunks, before the body arrives', () => {
    for (const cut of [1, 2, 3]) {
      const header = new Uint8Array(4);
      new DataView(header.buffer).setUint32(0, 0xffffffff);
      const { error } = refused([header.subarray(0, cut), header.subarray(cut)]);
      expect(error, `length field cut after ${cut} byte(s)`).toBeInstanceOf(FrameError);
    }
    const header = new Uint8Array(4);
    new DataView(header.buffer).setUint32(0, 16 * 1024 * 1024);
    const { decoder } = recorder();
    expect(() => {
      for (let i = 0; i < 4; i += 1) decoder.push(header.subarray(i, i + 1));
    }).toThrow(FrameError);
  });

  it('refuses a frame shorter than its header', () => {
    for (const length of [0, 1, 5]) {
      const bytes = new Uint8Array(4 + length);
      new DataView(bytes.buffer).setUint32(0, length);
      bytes[4] = 1;
      const { error } = refused([bytes]);
      expect(error, `length ${length}`).toBeInstanceOf(FrameError);
      expect((error as Error).message).toContain('shorter than its header');
    }
    // An id length that runs past the frame.
    const frame = rawFrame(1, 'inv_x', 0);
    frame[5] = 200;
    const { error } = refused([frame]);
    expect(error).toBeInstanceOf(FrameError);
    expect((error as Error).message).toContain('shorter than its header');
  });

  it('refuses a control frame that names an invocation, and an invocation frame that names none', () => {
    const hello = rawFrame(16, 'inv_x', 0, new TextEncoder().encode('upl_1'));
    expect(refused([hello]).error).toBeInstanceOf(FrameError);
    expect((refused([hello]).error as Error).message).toContain('names an invocation');
    expect(refused([rawFrame(17, 'inv_x', 3)]).error).toBeInstanceOf(FrameError);
    const { error, out } = refused([rawFrame(1, '', 0)]);
    expect(error).toBeInstanceOf(FrameError);
    expect((error as Error).message).toContain('names no invocation');
    expect(out).toEqual([]);
  });

  it('refuses bodies that do not fit their kind', () => {
    // end: 12 bytes, or 4 from an older agent
    for (const size of [0, 3, 5, 8, 11, 13])
      expect(refused([rawFrame(4, 'inv_x', 0, new Uint8Array(size))]).error, `end of ${size} bytes`).toBeInstanceOf(FrameError);
    expect(refused([rawFrame(2, 'inv_x', 0, new Uint8Array(1))]).error).toBeInstanceOf(FrameError); // head: a status
    expect(refused([rawFrame(5, 'inv_x', 0, new Uint8Array(1))]).error).toBeInstanceOf(FrameError); // error: flags + code length
    expect(refused([rawFrame(5, 'inv_x', 0, new Uint8Array([0, 5, 0x61]))]).error).toBeInstanceOf(FrameError); // code cut short
  });
});
