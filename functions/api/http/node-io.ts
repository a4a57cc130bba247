import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Context } from 'hono';
import type { AppEnv } from '../../dataplane/ports.js';
import { SECURITY_HEADERS } from './security-headers.js';
import { readAll } from '../../kernel/web-streams.js';
import { drained } from '../../../shared/drained.js';

/**
 * The relay's hot path reads and writes Node's own request and response where it runs on Node (through
 * @hono/node-server, which passes them as `c.env.incoming` / `c.env.outgoing`), and the web objects
 * elsewhere (Workers). Building a web Request around each Node request, and piping a web ReadableStream
 * into each Node response, cost more CPU per inference request than the relay's own work.
 */
function nodeBindings(c: { env: unknown }): { incoming: IncomingMessage; outgoing: ServerResponse } | null {
  const env = c.env as { incoming?: IncomingMessage; outgoing?: ServerResponse } | undefined;
  return env?.incoming && env.outgoing && typeof env.outgoing.writeHead === 'function' ? { incoming: env.incoming, outgoing: env.outgoing } : null;
}

/**
 * The client's address as this instance sees it: the socket's peer on Node (a reverse proxy's own address behind
 * one: its clients then share it), `cf-connecting-ip` on Workers (set by Cloudflare, never the client's), else
 * `unknown`. Forwarding headers a client writes itself are never believed.
 */
export function clientAddress(c: Context): string {
  const node = nodeBindings(c);
  if (node) return node.incoming.socket.remoteAddress ?? 'unknown';
  return c.req.header('cf-connecting-ip') ?? 'unknown';
}

/** The request body as it arrives, unlimited: for uploads that bound their own parts (the uplink's frames). */
export function bodyChunks(c: Context<AppEnv>): AsyncIterable<Uint8Array> | null {
  const node = nodeBindings(c);
  if (node) return nodeChunks(node.incoming);
  return c.req.raw.body ? readAll(c.req.raw.body) : null;
}

async function* nodeChunks(incoming: IncomingMessage): AsyncGenerator<Uint8Array> {
  try {
    yield* incoming.iterator({ destroyOnReturn: false }) as AsyncIterable<Uint8Array>;
  } finally {
    // A reader that gives up early (refused, oversized) leaves the rest to be discarded, not the socket
    // destroyed: the error answer must still reach the client.
    if (!incoming.readableEnded) incoming.resume();
  }
}

/**
 * The request body as it arrives, refused with `tooLarge()` over `maxBytes`: at once when its declared length
 * is over (this call throws), else while streaming once the bytes read pass it (the iteration throws).
 */
export function limitedBody(c: Context<AppEnv>, maxBytes: number, tooLarge: () => Error): AsyncIterable<Uint8Array> | null {
  const declared = Number(c.req.header('content-length'));
  if (Number.isFinite(declared) && declared > maxBytes) throw tooLarge();
  const chunks = bodyChunks(c);
  return chunks && limit(chunks, maxBytes, tooLarge);
}

async function* limit(chunks: AsyncIterable<Uint8Array>, maxBytes: number, tooLarge: () => Error): AsyncGenerator<Uint8Array> {
  let size = 0;
  for await (const chunk of chunks) {
    size += chunk.length;
    if (size > maxBytes) throw tooLarge();
    yield chunk;
  }
}

/** The whole body as text, limited as `limitedBody` limits it. */
export async function bodyText(c: Context<AppEnv>, maxBytes: number, tooLarge: () => Error): Promise<string> {
  const chunks = limitedBody(c, maxBytes, tooLarge);
  return chunks ? await textOf(chunks) : '';
}

/** A Node request's whole body as text, refused with `tooLarge()` once the bytes read pass `maxBytes`. */
export function incomingText(incoming: IncomingMessage, maxBytes: number, tooLarge: () => Error): Promise<string> {
  return textOf(limit(nodeChunks(incoming), maxBytes, tooLarge));
}

async function textOf(chunks: AsyncIterable<Uint8Array>): Promise<string> {
  const parts: Uint8Array[] = [];
  for await (const chunk of chunks) parts.push(chunk);
  return Buffer.concat(parts).toString('utf8');
}

/** Ends the connection at once (Node): what the client was still sending goes nowhere, and it sees the break. */
export function cutConnection(c: Context<AppEnv>): void {
  nodeBindings(c)?.incoming.destroy();
}

/** How long, and how many bytes of the rest of a refused body, a lingering close reads and discards. */
const LINGER_MS = 5_000;
const LINGER_BYTES = 64 * 1024 * 1024;

/**
 * Closes the connection after this answer (sent with `Connection: close`) the lingering way (Node): the answer goes
 * out, then what the client is still sending of its body is read and discarded until the body ends or the client
 * closes its side, and only then the connection closes; at most LINGER_MS and LINGER_BYTES, after which it closes
 * all the same. A client that writes its whole body before it reads (most do) gets the answer (an early 413)
 * rather than a reset (EPIPE) that can lose it.
 */
export function closeLingering(c: Context<AppEnv>): void {
  const node = nodeBindings(c);
  const socket = node?.incoming.socket;
  if (!node || !socket || socket.destroyed) return;
  const incoming = node.incoming;
  // Node ends a `Connection: close` answer's connection with `destroySoon` once the answer is written (so does
  // @hono/node-server's own drain, after 500 ms): that is deferred until the body has been read.
  const destroySoon = socket.destroySoon.bind(socket);
  let lingering = false;
  socket.destroySoon = () => {
    if (lingering) return;
    lingering = true;
    let read = 0;
    const close = () => {
      clearTimeout(timer);
      socket.destroySoon = destroySoon;
      destroySoon();
    };
    const timer = setTimeout(close, LINGER_MS);
    timer.unref();
    if (incoming.readableEnded) return close();
    // Discarded as Node's own dump does: a reader given up on (a web stream over the body) pauses it otherwise.
    incoming.removeAllListeners('data');
    incoming.on('data', (chunk: Buffer) => {
      read += chunk.length;
      if (read > LINGER_BYTES) close();
    });
    incoming.once('end', close);
    incoming.once('error', close);
    socket.once('end', close);
    incoming.resume();
  };
}

/** Aborts when the client goes away before its answer was complete. */
export function clientGone(c: Context<AppEnv>): AbortSignal {
  const node = nodeBindings(c);
  if (!node) return c.req.raw.signal;
  const gone = new AbortController();
  node.outgoing.once('close', () => {
    if (!node.outgoing.writableFinished) gone.abort('client disconnected');
  });
  return gone.signal;
}

/** Bytes of a streamed answer: the runtime's own, or text the surface adds (an error event). */
export type Chunk = Uint8Array | string;

/** A streamed answer, written as it is produced. */
export interface StreamSink {
  /** What the handler returns. */
  response: Response;
  /** Writes bytes; resolves once more may be written (or the client is gone). */
  write(chunks: readonly Chunk[]): Promise<void>;
  /** Writes the last bytes and ends the answer. */
  end(chunks: readonly Chunk[]): void;
  /**
   * Ends the answer now with `chunks` (an error event) for a client that stopped reading, and drops the connection
   * if it has not taken them within ABANDON_GRACE_MS; a write waiting for a drain returns. Later calls are ignored.
   */
  abandon(chunks: readonly Chunk[]): void;
}

/** How long a client that stopped reading has to take the error event that ends its answer before it is cut. */
const ABANDON_GRACE_MS = 1_000;

/** The header every answer carries: the requestId middleware sets it on Hono's own responses, not on these. */
const REQUEST_ID = 'x-request-id';

/**
 * Opens a streamed answer; `onGone` runs if the client leaves before its end. On Node, straight into the response:
 * the head goes out with the first bytes, a batch of chunks in one write (corked), the terminator with the last
 * bytes, and nothing is buffered beyond the socket's own backpressure. Elsewhere, a web stream pulled by the runtime.
 */
export function openStream(c: Context<AppEnv>, status: number, headers: Record<string, string>, onGone: () => void): StreamSink {
  const node = nodeBindings(c);
  if (node) {
    const { outgoing } = node;
    // Written here, past Hono's middleware: the headers every answer carries go with them.
    outgoing.writeHead(status, { ...SECURITY_HEADERS, ...headers, [REQUEST_ID]: c.get('requestId') });
    outgoing.once('close', () => {
      if (!outgoing.writableFinished) onGone();
    });
    return {
      // @hono/node-server leaves a response carrying this header alone: it is already being written.
      response: new Response(null, { headers: { 'x-hono-already-sent': 'true' } }),
      async write(chunks) {
        if (outgoing.destroyed || outgoing.writableEnded || writeAll(outgoing, chunks)) return;
        await drained(outgoing);
      },
      end(chunks) {
        if (outgoing.destroyed || outgoing.writableEnded) return;
        writeAll(outgoing, chunks);
        outgoing.end();
      },
      abandon(chunks) {
        if (outgoing.destroyed || outgoing.writableEnded) return;
        writeAll(outgoing, chunks);
        outgoing.end();
        const cut = setTimeout(() => outgoing.destroy(), ABANDON_GRACE_MS);
        cut.unref();
        outgoing.once('close', () => clearTimeout(cut));
      },
    };
  }
  const encoder = new TextEncoder();
  const bytes = (chunk: Chunk) => (typeof chunk === 'string' ? encoder.encode(chunk) : chunk);
  let controller!: ReadableStreamDefaultController<Uint8Array>;
  let gone = false;
  let wanted: (() => void) | null = null;
  const wake = () => {
    wanted?.();
    wanted = null;
  };
  const leave = () => {
    if (gone) return;
    gone = true;
    wake();
    onGone();
  };
  const body = new ReadableStream<Uint8Array>({
    start(c) {
      controller = c;
    },
    pull: wake,
    cancel: leave,
  });
  // Workers tell a client's disconnect on the request's signal (enable_request_signal) as well as by cancelling the
  // body, and the cancel does not cross every stream the body is piped through: either one ends the answer, so that
  // a write waiting for the client never waits for one that left.
  c.req.raw.signal.addEventListener('abort', leave, { once: true });
  return {
    response: new Response(body, { status, headers: { ...headers, [REQUEST_ID]: c.get('requestId') } }),
    async write(chunks) {
      if (gone) return;
      for (const chunk of chunks) controller.enqueue(bytes(chunk));
      if ((controller.desiredSize ?? 1) <= 0) await new Promise<void>((resolve) => (wanted = resolve));
    },
    end(chunks) {
      if (gone) return;
      for (const chunk of chunks) controller.enqueue(bytes(chunk));
      controller.close();
      // Over: a disconnect from now on is no client leaving early.
      gone = true;
    },
    abandon(chunks) {
      if (gone) return;
      for (const chunk of chunks) controller.enqueue(bytes(chunk));
      controller.close();
      gone = true;
      // A write waiting for the client to pull returns: nothing more goes into this body.
      wake();
    },
  };
}

/** Writes `chunks` in one go (one syscall for the batch); false when the socket wants a drain first. */
export function writeAll(outgoing: { cork(): void; uncork(): void; write(chunk: Chunk): boolean }, chunks: readonly Chunk[]): boolean {
  if (chunks.length === 1) return outgoing.write(chunks[0]!);
  let ok = true;
  outgoing.cork();
  for (const chunk of chunks) ok = outgoing.write(chunk) && ok;
  outgoing.uncork();
  return ok;
}
