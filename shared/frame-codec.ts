import type { Frame } from './contracts/relay.js';

/**
 * The binary frames of the uplink and of the per-invocation upload (docs/design.md section 5, step 5):
 *
 *     u32 length of the rest | u8 kind | u8 id length | id (ASCII) | u32 offset | body
 *
 * all integers big-endian. Invocation frames carry their invocation's id and offset; uplink control frames carry
 * no id. Bodies: `head` u16 status then the content type (UTF-8); `data` the runtime's bytes as they are; `end`
 * u32 tokens, u32 prompt tokens, u32 completion tokens (the runtime's usage; 0xFFFFFFFF: unknown), or u32 tokens
 * alone when neither count is known (as agents before usage sent it: so that a control plane before usage, a
 * peer instance during a rolling upgrade among them, reads what an older agent's frames become); `error` u8 flags (1: told) and u8 code length,
 * then the code and the message (UTF-8); `hello` the uplink's id (UTF-8); `pong` none (the offset field holds the
 * ping's sequence number). Nothing here allocates per frame beyond the frame itself: no JSON, no schema.
 */
const KIND = { accept: 1, head: 2, data: 3, end: 4, error: 5, hello: 16, pong: 17 } as const;
const HEADER_BYTES = 4 + 1 + 1 + 4;
/** An `end` frame's usage count that the runtime did not report. */
const UNKNOWN_COUNT = 0xffffffff;
/** The `end` body without usage (tokens only, as before usage), and with it. */
const END_BYTES_V1 = 4;
const END_BYTES = 12;

/** Largest frame accepted (its length field): the agent cuts runtime bytes into pieces far below it. */
export const MAX_FRAME_BYTES = 1024 * 1024;
/** The agent's largest data piece: bytes beyond it start the next frame. */
export const DATA_PIECE_BYTES = 32 * 1024;

/** Frames of the uplink itself: `hello` names the uplink (confirmed down the stream), `pong` answers a ping. */
export type UplinkControl = { t: 'hello'; uplinkId: string } | { t: 'pong'; seq: number };

/** The bytes are not frames of this protocol: the upload is refused and ends. */
export class FrameError extends Error {}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function frameOf(kind: number, id: string, offset: number, bodyBytes: number): { bytes: Uint8Array; view: DataView; at: number } {
  if (id.length > 255) throw new FrameError('an invocation id is at most 255 characters');
  const bytes = new Uint8Array(HEADER_BYTES + id.length + bodyBytes);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  view.setUint32(0, bytes.length - 4);
  bytes[4] = kind;
  bytes[5] = id.length;
  for (let i = 0; i < id.length; i += 1) bytes[6 + i] = id.charCodeAt(i) & 0x7f;
  view.setUint32(6 + id.length, offset);
  return { bytes, view, at: HEADER_BYTES + id.length };
}

/** One invocation frame, ready for the wire. */
export function encodeFrame(invocationId: string, frame: Frame): Uint8Array {
  switch (frame.t) {
    case 'accept':
      return frameOf(KIND.accept, invocationId, frame.o, 0).bytes;
    case 'data': {
      const out = frameOf(KIND.data, invocationId, frame.o, frame.d.length);
      out.bytes.set(frame.d, out.at);
      return out.bytes;
    }
    case 'end': {
      const usage = frame.promptTokens !== null || frame.completionTokens !== null;
      const out = frameOf(KIND.end, invocationId, frame.o, usage ? END_BYTES : END_BYTES_V1);
      out.view.setUint32(out.at, frame.tokens);
      if (usage) {
        out.view.setUint32(out.at + 4, frame.promptTokens ?? UNKNOWN_COUNT);
        out.view.setUint32(out.at + 8, frame.completionTokens ?? UNKNOWN_COUNT);
      }
      return out.bytes;
    }
    case 'head': {
      const type = encoder.encode(frame.contentType);
      const out = frameOf(KIND.head, invocationId, frame.o, 2 + type.length);
      out.view.setUint16(out.at, frame.status);
      out.bytes.set(type, out.at + 2);
      return out.bytes;
    }
    case 'error': {
      const code = encoder.encode(frame.code).subarray(0, 255);
      const message = encoder.encode(frame.message);
      const out = frameOf(KIND.error, invocationId, frame.o, 2 + code.length + message.length);
      out.bytes[out.at] = frame.told ? 1 : 0;
      out.bytes[out.at + 1] = code.length;
      out.bytes.set(code, out.at + 2);
      out.bytes.set(message, out.at + 2 + code.length);
      return out.bytes;
    }
  }
}

/** One uplink control frame, ready for the wire. */
export function encodeControl(control: UplinkControl): Uint8Array {
  if (control.t === 'pong') return frameOf(KIND.pong, '', control.seq, 0).bytes;
  const id = encoder.encode(control.uplinkId);
  const out = frameOf(KIND.hello, '', 0, id.length);
  out.bytes.set(id, out.at);
  return out.bytes;
}

export interface FrameHandlers {
  frame(invocationId: string, frame: Frame): void;
  control(control: UplinkControl): void;
}

/**
 * Cuts a byte stream into frames as it arrives, whatever the chunking. A frame that lies inside one chunk is read
 * in place (its data is a view of the chunk, not a copy); one split across chunks is assembled once whole. Throws
 * `FrameError` on anything that is not a frame, or a frame over `maxFrameBytes`, before buffering it.
 */
export class FrameDecoder {
  private pending: Uint8Array[] = [];
  private pendingBytes = 0;

  constructor(
    private readonly handlers: FrameHandlers,
    private readonly maxFrameBytes = MAX_FRAME_BYTES,
  ) {}

  /** Bytes of a frame still incomplete: an upload that ends with some ended mid-frame. */
  get buffered(): number {
    return this.pendingBytes;
  }

  push(chunk: Uint8Array): void {
    let at = 0;
    if (this.pendingBytes > 0) {
      // Only the frame left open by earlier chunks is assembled; the frames after it are read in place.
      if (this.pendingBytes < 4) {
        at = Math.min(4 - this.pendingBytes, chunk.length);
        this.keep(chunk.subarray(0, at));
        if (this.pendingBytes < 4) return;
      }
      const length = this.lengthOfPending();
      if (length > this.maxFrameBytes) throw new FrameError(`a frame of ${length} bytes exceeds ${this.maxFrameBytes}`);
      const missing = 4 + length - this.pendingBytes;
      const take = Math.min(missing, chunk.length - at);
      this.keep(chunk.subarray(at, at + take));
      at += take;
      if (take < missing) return;
      const frame = concat(this.pending, this.pendingBytes);
      this.pending = [];
      this.pendingBytes = 0;
      this.read(frame.subarray(4), new DataView(frame.buffer, frame.byteOffset, frame.byteLength), 4);
    }
    const view = new DataView(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    while (chunk.length - at >= 4) {
      const length = view.getUint32(at);
      if (length > this.maxFrameBytes) throw new FrameError(`a frame of ${length} bytes exceeds ${this.maxFrameBytes}`);
      if (chunk.length - at - 4 < length) break;
      this.read(chunk.subarray(at + 4, at + 4 + length), view, at + 4);
      at += 4 + length;
    }
    if (at < chunk.length) this.keep(chunk.subarray(at));
  }

  private keep(bytes: Uint8Array): void {
    if (bytes.length === 0) return;
    this.pending.push(bytes);
    this.pendingBytes += bytes.length;
  }

  private lengthOfPending(): number {
    const head = this.pending[0]!.length >= 4 ? this.pending[0]! : concat(this.pending, this.pendingBytes);
    return new DataView(head.buffer, head.byteOffset, 4).getUint32(0);
  }

  /** `frame` is the frame after its length; `view` covers the chunk it lies in, from which `base` is its start. */
  private read(frame: Uint8Array, view: DataView, base: number): void {
    if (frame.length < HEADER_BYTES - 4) throw new FrameError('a frame is shorter than its header');
    const kind = frame[0]!;
    const idLength = frame[1]!;
    const bodyAt = 2 + idLength + 4;
    if (frame.length < bodyAt) throw new FrameError('a frame is shorter than its header');
    const id = idLength === 0 ? '' : String.fromCharCode.apply(null, frame.subarray(2, 2 + idLength) as unknown as number[]);
    const o = view.getUint32(base + 2 + idLength);
    const body = frame.subarray(bodyAt);
    const bodyView = () => new DataView(body.buffer, body.byteOffset, body.byteLength);
    if (kind >= KIND.hello) {
      if (idLength !== 0) throw new FrameError('an uplink control frame names an invocation');
      if (kind === KIND.hello) this.handlers.control({ t: 'hello', uplinkId: decoder.decode(body) });
      else if (kind === KIND.pong) this.handlers.control({ t: 'pong', seq: o });
      else throw new FrameError(`unknown frame kind ${kind}`);
      return;
    }
    if (idLength === 0) throw new FrameError('an invocation frame names no invocation');
    switch (kind) {
      case KIND.accept:
        return this.handlers.frame(id, { o, t: 'accept' });
      case KIND.data:
        return this.handlers.frame(id, { o, t: 'data', d: body });
      case KIND.end: {
        if (body.length !== END_BYTES && body.length !== END_BYTES_V1)
          throw new FrameError(`an end frame carries ${END_BYTES} bytes, or ${END_BYTES_V1} without usage`);
        const end = bodyView();
        const count = (at: number) => {
          if (body.length < at + 4) return null;
          const value = end.getUint32(at);
          return value === UNKNOWN_COUNT ? null : value;
        };
        return this.handlers.frame(id, { o, t: 'end', tokens: end.getUint32(0), promptTokens: count(4), completionTokens: count(8) });
      }
      case KIND.head:
        if (body.length < 2) throw new FrameError('a head frame carries a status');
        return this.handlers.frame(id, { o, t: 'head', status: bodyView().getUint16(0), contentType: decoder.decode(body.subarray(2)) });
      case KIND.error: {
        if (body.length < 2 || body.length < 2 + body[1]!) throw new FrameError('an error frame is shorter than its code');
        const codeEnd = 2 + body[1]!;
        const frame: Frame = { o, t: 'error', code: decoder.decode(body.subarray(2, codeEnd)), message: decoder.decode(body.subarray(codeEnd)) };
        if (body[0] === 1) frame.told = true;
        return this.handlers.frame(id, frame);
      }
      default:
        throw new FrameError(`unknown frame kind ${kind}`);
    }
  }
}

/** The bytes of `parts` (`total` of them) in one array. */
export function concat(parts: readonly Uint8Array[], total = parts.reduce((n, p) => n + p.length, 0)): Uint8Array {
  if (parts.length === 1) return parts[0]!;
  const out = new Uint8Array(total);
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}
