import { PassThrough } from 'node:stream';
import { request, type Dispatcher } from 'undici';
import type { Frame } from '../../shared/contracts/relay.js';
import { encodeControl, encodeFrame } from '../../shared/frame-codec.js';
import { newId } from '../../shared/ids.js';
import { turnBatch } from '../../shared/turn-batch.js';
import { drained } from '../../shared/drained.js';
import type { SignedClient } from './http.js';

const PATH = '/agent/v1/uplink';

export interface UplinkOptions {
  baseUrl: string;
  dispatcher: Dispatcher;
  signedHeaders: SignedClient['signedHeaders'];
  /** A new uplink not confirmed down the stream within this long is taken for buffered: the agent falls back. */
  confirmMs: number;
  /** An uplink is replaced by a fresh one at this age, before servers and proxies time a request out. */
  maxAgeMs: number;
  log: (event: string, fields?: Record<string, unknown>) => void;
}

/** Frames of one invocation sent but not yet acknowledged: resent on the next uplink if this one breaks. */
interface Unacked {
  frames: Array<{ o: number; bytes: Uint8Array }>;
  /** Its last frame (end or error) was sent: forgotten once acknowledged. */
  finished: boolean;
}

/** One POST /agent/v1/uplink: a streamed request body, written once per event-loop turn. */
class Connection {
  readonly id = newId('uplink');
  readonly openedAt = Date.now();
  private readonly body = new PassThrough();
  private readonly batch = turnBatch<Uint8Array>((chunks) => {
    if (!this.body.destroyed && !this.body.writableEnded) this.body.write(Buffer.concat(chunks));
  });
  /** Settles when the request ends, whichever way: the status, or 0 when the connection broke. */
  readonly ended: Promise<number>;

  constructor(opts: UplinkOptions) {
    this.ended = (async () => {
      const response = await request(new URL(PATH, opts.baseUrl), {
        method: 'POST',
        headers: await opts.signedHeaders('POST', PATH, '', { 'content-type': 'application/octet-stream' }),
        body: this.body,
        dispatcher: opts.dispatcher,
      });
      // The status is the answer: a body that breaks off while drained changes nothing about it.
      await response.body.dump().catch(() => {});
      return response.statusCode;
      // Status 0: the uplink broke without an answer, which its owner handles as such (reconnects, resends).
    })().catch(() => 0);
  }

  /** Queues bytes; false while the body is over its high-water mark (wait for `drained`). */
  write(bytes: Uint8Array): boolean {
    this.batch.push(bytes);
    return this.body.writableLength < this.body.writableHighWaterMark;
  }

  drained(): Promise<void> {
    if (this.body.writableLength < this.body.writableHighWaterMark || this.body.destroyed) return Promise.resolve();
    return drained(this.body);
  }

  /** Ends the body after what is queued: the control plane answers once it has read it all. */
  end(): void {
    this.batch.flush();
    this.body.end();
  }

  destroy(): void {
    this.body.destroy();
  }
}

/**
 * The agent's uplink (docs/design.md section 5, step 5): one long-lived streamed POST per machine carrying every
 * invocation's frames, binary and tagged by invocation, authenticated once when it opens. It is opened for each
 * stream connection and counts once the control plane confirms it down that stream (`uplink` event); one that is
 * not confirmed within `confirmMs` (a proxy that buffers request bodies) is given up, and invocations use the
 * per-invocation upload until the next stream connection tries again. Frames are kept until acknowledged down
 * the stream (`ack`), so that when the uplink breaks a new one resends them and the control plane drops the
 * duplicates by offset: nothing lost, nothing twice. Ping answers ride it too.
 */
export function createUplink(opts: UplinkOptions) {
  let current: Connection | null = null;
  let state: 'off' | 'trying' | 'up' | 'fallback' = 'off';
  let confirmTimer: NodeJS.Timeout | undefined;
  let ageTimer: NodeJS.Timeout | undefined;
  const unacked = new Map<string, Unacked>();

  function open(): void {
    const connection = new Connection(opts);
    current = connection;
    connection.write(encodeControl({ t: 'hello', uplinkId: connection.id }));
    // Resent in order, each invocation's frames contiguous from what the control plane acknowledged.
    for (const entry of unacked.values()) for (const frame of entry.frames) connection.write(frame.bytes);
    clearTimeout(ageTimer);
    ageTimer = setTimeout(() => rotate(connection), opts.maxAgeMs);
    void connection.ended.then((status) => ended(connection, status));
  }

  /** Replaces an old uplink: the new one opens once the old one's frames are all read (its answer came). */
  function rotate(connection: Connection): void {
    if (current !== connection) return;
    connection.end();
  }

  function ended(connection: Connection, status: number): void {
    if (current !== connection) return;
    current = null;
    if (state === 'off' || state === 'fallback') return;
    if (state === 'trying' && status !== 200) {
      fallBack(`the uplink was refused (${status === 0 ? 'connection broke' : `HTTP ${status}`})`);
      return;
    }
    // Broken or rotated: the next one resends what was not acknowledged.
    setTimeout(
      () => {
        if (current === null && (state === 'up' || state === 'trying')) open();
      },
      status === 200 ? 0 : 250,
    );
  }

  function fallBack(reason: string): void {
    state = 'fallback';
    clearTimeout(confirmTimer);
    clearTimeout(ageTimer);
    current?.destroy();
    current = null;
    opts.log('uplink unavailable: per-invocation uploads until the stream reconnects', { reason });
  }

  return {
    /** The stream (re)connected: open an uplink for it. */
    start(): void {
      this.stop();
      state = 'trying';
      open();
      confirmTimer = setTimeout(() => {
        if (state === 'trying') fallBack(`not confirmed within ${opts.confirmMs} ms (a proxy may buffer request bodies)`);
      }, opts.confirmMs);
    },
    /** The stream is gone, and with it every invocation it carried. */
    stop(): void {
      state = 'off';
      clearTimeout(confirmTimer);
      clearTimeout(ageTimer);
      current?.destroy();
      current = null;
      unacked.clear();
    },
    /** The control plane confirmed an uplink down the stream. */
    confirmed(uplinkId: string): void {
      if (current?.id !== uplinkId || state === 'off' || state === 'fallback') return;
      if (state === 'trying') opts.log('uplink confirmed');
      state = 'up';
      clearTimeout(confirmTimer);
    },
    acknowledged(offsets: Record<string, number>): void {
      for (const [invocationId, next] of Object.entries(offsets)) {
        const entry = unacked.get(invocationId);
        if (!entry) continue;
        let drop = 0;
        while (drop < entry.frames.length && entry.frames[drop]!.o < next) drop += 1;
        entry.frames.splice(0, drop);
        if (entry.frames.length === 0 && entry.finished) unacked.delete(invocationId);
      }
    },
    /** Whether new invocations go up the uplink. */
    usable(): boolean {
      return state === 'up';
    },
    /** Sends one frame; resolves when more may be sent (backpressure). */
    send(invocationId: string, frame: Frame): Promise<void> | undefined {
      if (state !== 'up' && state !== 'trying') return undefined;
      const bytes = encodeFrame(invocationId, frame);
      let entry = unacked.get(invocationId);
      if (!entry) unacked.set(invocationId, (entry = { frames: [], finished: false }));
      entry.frames.push({ o: frame.o, bytes });
      if (frame.t === 'end' || frame.t === 'error') entry.finished = true;
      if (current && !current.write(bytes)) return current.drained();
      return undefined;
    },
    /** Answers a stream ping over the uplink; false when there is no confirmed uplink to carry it. */
    pong(seq: number): boolean {
      if (state !== 'up' || !current) return false;
      current.write(encodeControl({ t: 'pong', seq }));
      return true;
    },
  };
}
export type Uplink = ReturnType<typeof createUplink>;
