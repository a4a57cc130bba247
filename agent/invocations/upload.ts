import type { Readable } from 'node:stream';
import { request, type Dispatcher } from 'undici';
import { FramesAccepted, type Frame } from '../../shared/contracts/relay.js';
import { DATA_PIECE_BYTES, encodeFrame } from '../../shared/frame-codec.js';
import { fromRequest, readResult, type SignedClient } from '../link/http.js';

/** Resolves after pending I/O callbacks ran: whatever the runtime already sent has been read by then. */
export const afterIo = () => new Promise<null>((resolve) => setImmediate(() => resolve(null)));

export interface FramesUploadOptions {
  baseUrl: string;
  dispatcher: Dispatcher;
  signedHeaders: SignedClient['signedHeaders'];
}

/**
 * The request body of an upload: each frame as it comes, with the frames produced meanwhile (the head and the
 * first bytes, the last bytes and the end) in the same write, one write on each side instead of one per frame.
 * Only what has already arrived is waited for.
 */
async function* batched(iterator: AsyncIterator<Frame>, encoded: (frame: Frame) => Uint8Array): AsyncGenerator<Uint8Array> {
  let next = iterator.next();
  for (;;) {
    const first = await next;
    if (first.done) return;
    const batch = [encoded(first.value)];
    let size = batch[0]!.length;
    next = iterator.next();
    while (size < DATA_PIECE_BYTES) {
      const more = await Promise.race([next, afterIo()]);
      if (more === null) break;
      if (more.done) {
        yield Buffer.concat(batch);
        return;
      }
      const bytes = encoded(more.value);
      batch.push(bytes);
      size += bytes.length;
      next = iterator.next();
    }
    yield Buffer.concat(batch);
  }
}

/** The per-invocation upload: the fallback when no uplink is confirmed. */
export function createFramesUpload(opts: FramesUploadOptions) {
  const post = async (path: string, body: Uint8Array | AsyncIterable<Uint8Array>) =>
    fromRequest(
      await request(new URL(path, opts.baseUrl), {
        method: 'POST',
        headers: await opts.signedHeaders('POST', path, '', { 'content-type': 'application/octet-stream' }),
        // undici writes an async iterable chunk by chunk (chunked encoding); its typings only name Readable.
        body: body as Uint8Array | Readable,
        dispatcher: opts.dispatcher,
      }),
    );

  /** Asks where the control plane stopped and resends the frames from there; up to three times. */
  async function resume(path: string, sent: Array<{ o: number; bytes: Uint8Array }>): Promise<void> {
    // A failed ask or resend is tried again; after the third the upload fails with the error thrown below.
    for (let attempt = 0; attempt < 3; attempt += 1) {
      const at = await request(new URL(path, opts.baseUrl), { headers: await opts.signedHeaders('GET', path, ''), dispatcher: opts.dispatcher })
        .then((r) => readResult(fromRequest(r), FramesAccepted))
        .catch(() => null);
      if (!at?.success) continue;
      const rest = Buffer.concat(sent.filter((frame) => frame.o >= at.data.nextOffset).map((frame) => frame.bytes));
      const resent = await post(path, rest)
        .then((r) => readResult(r, FramesAccepted))
        .catch(() => null);
      if (resent?.success) return;
    }
    throw new Error('frames upload failed after resuming');
  }

  /** Sends an invocation's frames on an upload of its own; resumes from where the control plane stopped. */
  return async function upload(invocationId: string, frames: AsyncIterable<Frame>): Promise<void> {
    const path = `/agent/v1/invocations/${encodeURIComponent(invocationId)}/frames`;
    const iterator = frames[Symbol.asyncIterator]();
    const sent: Array<{ o: number; bytes: Uint8Array }> = [];
    const encoded = (frame: Frame) => {
      const bytes = encodeFrame(invocationId, frame);
      sent.push({ o: frame.o, bytes });
      return bytes;
    };
    const first = await post(path, batched(iterator, encoded)).then(
      (response) => readResult(response, FramesAccepted),
      (error: unknown) => ({ success: false as const, status: 0, error: { code: 'network_error', message: String(error) } }),
    );
    if (first.success) return;
    if (first.status !== 0) throw new Error(`${first.error.code}: ${first.error.message}`);
    // The upload broke: drain what is left, then resend from where the control plane stopped.
    for (;;) {
      const next = await iterator.next();
      if (next.done) break;
      encoded(next.value);
    }
    await resume(path, sent);
  };
}
