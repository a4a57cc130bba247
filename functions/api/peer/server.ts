import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createTlsServer } from 'node:https';
import { Invoke } from '../../../shared/contracts/relay.js';
import { ApiError } from '../../kernel/errors.js';
import type { Ports } from '../../dataplane/ports.js';
import { framesOffset, receiveFrames, runUplink } from '../../link/uploads.js';
import { FRAMES_TYPE, MACHINE_HEADER, serveForwarded } from '../../link/forwarded.js';
import { admitForwarded } from '../../dataplane/forwarded-admission.js';
import type { PeerAuth } from '../../link/peer-auth.js';
import { incomingText, writeAll } from '../http/node-io.js';
import { drained } from '../../../shared/drained.js';
import { capConnections, headerBounds } from '../http/listener-bounds.js';
import { errorFields } from '../../kernel/telemetry/error-fields.js';

const FRAMES_PATH = /^\/peer\/v1\/agent\/invocations\/([^/]{1,255})\/frames$/;

/** The peer listener's certificate and key (PEM): it serves HTTPS instead of HTTP. */
export interface PeerTls {
  cert: string;
  key: string;
}

export interface PeerServer {
  /** Where the other instances reach it (advertised with this instance's lease). */
  url: string;
  close(): Promise<void>;
}

function header(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return typeof value === 'string' ? value : undefined;
}

function answer(res: ServerResponse, status: number, body: unknown): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

function answerError(res: ServerResponse, error: ApiError): void {
  answer(res, error.status, { error: { code: error.code, message: error.message } });
}

/**
 * The server half of the peer channel (docs/design.md section 5, step 3): its own listener, never the public port,
 * answering only other instances of the cluster (`PeerAuth`). Routes:
 * - POST /peer/v1/invoke: runs a forwarded invocation on a machine whose link this instance holds, and streams its
 *   frames back as the answer (binary, as on the uplink; a failure is an `error` frame at `FORWARDED_FAILED_OFFSET`).
 *   The caller closing the request cancels the invocation.
 * - /peer/v1/agent/uplink and /peer/v1/agent/invocations/{id}/frames: an agent upload that landed on the calling
 *   instance, piped here; answered as `/agent/v1` would.
 * The machine is named by `x-lunanexa-machine`: the calling instance authenticated it. Each request carries a peer
 * token of its own, bound to its method, path and machine (and a forwarded invocation's id) and taken once.
 * Its connections are bounded as the API's are (`api/http/listener-bounds.ts`).
 */
export async function startPeerServer(
  ports: Ports,
  auth: PeerAuth,
  opts: { host: string; port: number; advertise?: string; tls?: PeerTls },
): Promise<PeerServer> {
  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const machine = req.headers[MACHINE_HEADER];
    const machineId = typeof machine === 'string' ? machine : '';
    const claims = await auth.verify(req.headers.authorization, { method: req.method ?? '', path: req.url ?? '', machineId });
    if (!claims) throw new ApiError('unauthorized', 'peer requests need a peer token of this cluster, for this request, used once');
    if (machineId.length === 0) throw new ApiError('bad_request', `${MACHINE_HEADER} is missing`);
    const path = (req.url ?? '').split('?')[0]!;
    if (path === '/peer/v1/invoke' && req.method === 'POST') return invoke(req, res, machineId, claims.inv);
    if (path === '/peer/v1/agent/uplink' && req.method === 'POST') {
      return answer(res, 200, await runUplink(ports, machineId, req as AsyncIterable<Uint8Array>, () => req.destroy()));
    }
    const frames = FRAMES_PATH.exec(path);
    if (frames && req.method === 'GET') return answer(res, 200, framesOffset(ports, machineId, decodeURIComponent(frames[1]!)));
    if (frames && req.method === 'POST')
      return answer(res, 200, await receiveFrames(ports, machineId, decodeURIComponent(frames[1]!), req as AsyncIterable<Uint8Array>));
    throw new ApiError('not_found', 'no such peer route');
  };

  const invoke = async (req: IncomingMessage, res: ServerResponse, machineId: string, invocationId: string | undefined) => {
    let parsed;
    try {
      const maxBytes = ports.config.inferenceMaxBodyBytes * 2;
      const text = await incomingText(req, maxBytes, () => new ApiError('payload_too_large', `request body exceeds ${maxBytes} bytes`));
      parsed = Invoke.safeParse(JSON.parse(text));
    } catch (error) {
      if (error instanceof ApiError) throw error;
      throw new ApiError('invalid_json', 'the forwarded invocation is not JSON');
    }
    if (!parsed.success) throw new ApiError('validation_failed', 'the forwarded invocation does not match the contract');
    if (parsed.data.invocationId !== invocationId) throw new ApiError('unauthorized', "the peer token is not this invocation's");
    const invoke = parsed.data;
    const { holder, admission } = ports.dataPlane;
    const noStream = () => new ApiError('no_stream', "this instance does not hold the machine's link");
    // Held elsewhere now (or nowhere): the caller retries on another replica, before any byte reached its client.
    if (!holder.hasLocalStream(machineId)) throw noStream();
    // The replica's slots are counted here, where every instance's calls to the machine meet: the invocation waits
    // for one in its lane, and the caller going away (its cancel, its deadline) ends the wait.
    const wait = new AbortController();
    const leave = () => wait.abort();
    res.once('close', leave);
    const slot = await admitForwarded(admission, invoke, (name) => header(req, name), wait.signal).finally(() => res.off('close', leave));
    if (!slot || res.destroyed) {
      slot?.release();
      return;
    }
    // The stream may have gone while the invocation waited for its slot.
    if (!holder.hasLocalStream(machineId)) {
      slot.release();
      throw noStream();
    }
    res.writeHead(200, { 'content-type': FRAMES_TYPE });
    const run = serveForwarded(
      holder,
      invoke,
      machineId,
      {
        write: (chunks) => {
          if (!res.destroyed) writeAll(res, chunks);
        },
        end: () => {
          slot.release();
          res.end();
        },
        // Flow control: a caller that stopped reading its answer holds the node back here too.
        ready: () => (res.writableNeedDrain && !res.destroyed ? drained(res) : null),
      },
      () => slot.firstByte(),
    );
    res.once('close', () => {
      slot.release();
      run.gone();
    });
    await run.dispatched;
  };

  const listener = (req: IncomingMessage, res: ServerResponse) => {
    handle(req, res).catch((error: unknown) => {
      if (error instanceof ApiError) return answerError(res, error);
      ports.logger.error({ err: errorFields(error) }, 'peer request failed');
      answerError(res, new ApiError('internal', 'the peer request failed'));
    });
  };
  // Forwarded invocations and piped uplinks are long-lived requests whose bodies may stream for minutes.
  const options = { ...headerBounds(ports.config), requestTimeout: 0, keepAliveTimeout: 65_000 };
  const server: Server = opts.tls ? createTlsServer({ ...options, cert: opts.tls.cert, key: opts.tls.key }, listener) : createServer(options, listener);
  capConnections(server, ports.config);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.host, () => resolve());
  });
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : opts.port;
  return {
    url: opts.advertise ?? `${opts.tls ? 'https' : 'http'}://${opts.host.includes(':') ? `[${opts.host}]` : opts.host}:${port}`,
    async close() {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}
