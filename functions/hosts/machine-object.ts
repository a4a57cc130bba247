import { Hono } from 'hono';
import { createMiddleware } from 'hono/factory';
import { requestId } from 'hono/request-id';
import { Invoke } from '../../shared/contracts/relay.js';
import { ApiError } from '../kernel/errors.js';
import { handleError, notFound } from '../api/http/errors.js';
import type { BusMessage } from '../kernel/ports/bus.js';
import { createMemoryBus } from '../kernel/memory-bus.js';
import { FORWARDED_FAILED_OFFSET, FRAMES_TYPE, MACHINE_HEADER, serveForwarded } from '../link/forwarded.js';
import { encodeFrame } from '../../shared/frame-codec.js';
import { admitForwarded } from '../dataplane/forwarded-admission.js';
import { registerStream } from '../api/agent-gateway/stream.js';
import { registerFrames } from '../api/agent-gateway/frames.js';
import { NO_STREAM } from '../link/uploads.js';
import { openNeonStore } from '../store/neon.js';
import type { AppEnv, Ports } from '../dataplane/ports.js';
import { invalidEnvResponse, parseWorkerEnv } from './worker-env.js';
import { edgeConfig, edgePorts } from './worker-ports.js';
import { PRINCIPAL_HEADER, WORKLOAD_CANCELLED } from '../link/durable-holders.js';
import { Mailbox } from '../link/mailbox.js';

/** How many cancels of invocations not (yet) known here the object remembers. */
const MAX_EARLY_CANCELS = 1_024;
/** Why a queued invocation's wait was ended by the cancel API rather than by its caller leaving. */
const BY_API = 'cancelled by API';
const CANCELLED_EARLY = () => new ApiError('conflict', 'the invocation was cancelled before it reached the machine');

/** Longest a channel wait may be asked for. */
const MAX_CHANNEL_WAIT_MS = 30_000;

/** The machine the Worker authenticated, handed over with the request: the object is reachable only from the Worker. */
const trusted = createMiddleware<AppEnv>(async (c, next) => {
  const raw = c.req.header(PRINCIPAL_HEADER);
  if (!raw) throw new ApiError('unauthorized', 'a machine link serves only requests its Worker authenticated');
  const principal = JSON.parse(raw) as { machineId: string; workspaceId: string; credentialId: string; credentialExpiresAt: string };
  c.set('machine', { ...principal, credentialExpiresAt: new Date(principal.credentialExpiresAt) });
  c.set('rawBody', '');
  await next();
});

function machineOf(c: { req: { header(name: string): string | undefined } }): string {
  const machineId = c.req.header(MACHINE_HEADER);
  if (!machineId) throw new ApiError('bad_request', `${MACHINE_HEADER} is missing`);
  return machineId;
}

/** The routes of a machine's object: the agent's stream and uploads, and what the Worker forwards to them. */
function linkApp(ports: Ports, mailbox: Mailbox): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  app.use('*', requestId({ headerName: 'X-Request-Id', generator: () => crypto.randomUUID() }));
  app.use('*', async (c, next) => {
    c.set('ports', ports);
    await next();
  });
  app.onError(handleError);
  app.notFound(notFound);

  const gateway = new Hono<AppEnv>();
  registerStream(gateway, trusted);
  registerFrames(gateway, ports.config.framesMaxBytes, { buffered: trusted, streamed: trusted });
  app.route('/agent/v1', gateway);

  const { holder, admission } = ports.dataPlane;
  /** The invocations forwarded here and still running, by invocation id, with their workload. */
  const forwarded = new Map<string, { workloadId: string; run: ReturnType<typeof serveForwarded>; abandon(): void }>();
  /**
   * Invocations cancelled before they were known here (the cancel overtook its invocation, still waiting for a
   * slot or in flight): refused when they arrive. Bounded: the oldest are forgotten first.
   */
  const cancelledEarly = new Set<string>();
  const isCancelledEarly = (invocationId: string) => cancelledEarly.delete(invocationId);
  /** Invocations waiting here for a slot of their replica, with their workload: a cancel ends the wait. */
  const queued = new Map<string, { workloadId: string; wait: AbortController }>();
  // An invocation forwarded by a Worker request: queued for a slot of its replica (the object is the one place
  // that sees every isolate's invocations for this machine), then sent down the stream; its frames stream back.
  app.post('/link/v1/invoke', async (c) => {
    const machineId = machineOf(c);
    const parsed = Invoke.safeParse(await c.req.json());
    if (!parsed.success) throw new ApiError('validation_failed', 'the forwarded invocation does not match the contract');
    const invoke = parsed.data;
    if (!holder.hasLocalStream(machineId)) throw NO_STREAM();
    if (isCancelledEarly(invoke.invocationId)) throw CANCELLED_EARLY();
    const wait = new AbortController();
    queued.set(invoke.invocationId, { workloadId: invoke.workloadId, wait });
    const slot = await admitForwarded(admission, invoke, (name) => c.req.header(name), wait.signal).finally(() => queued.delete(invoke.invocationId));
    if (!slot) {
      // Cancelled by the API: the request waiting for this answer is told so, as a running one would be.
      if (wait.signal.reason === BY_API) {
        const frame = encodeFrame(invoke.invocationId, { o: FORWARDED_FAILED_OFFSET, t: 'error', code: WORKLOAD_CANCELLED, message: BY_API });
        return new Response(new Blob([frame as Uint8Array<ArrayBuffer>]), { headers: { 'content-type': FRAMES_TYPE } });
      }
      throw CANCELLED_EARLY();
    }
    // The stream may have gone, or the caller cancelled, while the invocation waited for its slot.
    if (!holder.hasLocalStream(machineId) || isCancelledEarly(invoke.invocationId)) {
      slot.release();
      throw holder.hasLocalStream(machineId) ? CANCELLED_EARLY() : NO_STREAM();
    }
    let out!: ReadableStreamDefaultController<Uint8Array>;
    let run: ReturnType<typeof serveForwarded> | undefined;
    const finished = () => {
      forwarded.delete(invoke.invocationId);
      slot.release();
    };
    // The Worker request went away: the node stops the call and the slot is free at once, whether the object
    // learns it from the answer's stream being cancelled or from the explicit cancel.
    let open = true;
    const abandon = () => {
      run?.gone();
      finished();
      // Nobody reads the answer any more (or its stream is cancelled already): it ends, and so does this request.
      if (open) out.close();
      open = false;
    };
    /** Settles when the Worker reads on (flow control: credit waits for it). */
    let pulled: (() => void) | null = null;
    const wakePull = () => {
      pulled?.();
      pulled = null;
    };
    const body = new ReadableStream<Uint8Array>(
      {
        start(controller) {
          out = controller;
        },
        pull() {
          wakePull();
        },
        cancel() {
          open = false;
          wakePull();
          abandon();
        },
      },
      new CountQueuingStrategy({ highWaterMark: 16 }),
    );
    run = serveForwarded(
      holder,
      invoke,
      machineId,
      {
        write(chunks) {
          if (!open) return;
          for (const chunk of chunks) out.enqueue(chunk);
        },
        ready() {
          if (!open || (out.desiredSize ?? 1) > 0) return null;
          return new Promise<void>((resolve) => {
            pulled = resolve;
          });
        },
        end() {
          if (open) out.close();
          open = false;
          wakePull();
          finished();
        },
      },
      () => slot.firstByte(),
    );
    forwarded.set(invoke.invocationId, { workloadId: invoke.workloadId, run, abandon });
    await run.dispatched;
    return new Response(body, { headers: { 'content-type': FRAMES_TYPE } });
  });

  // The Worker request stopped the invocation (its client went away, its deadline passed). Said explicitly as well
  // as by cancelling the answer's stream, which does not cross every proxy between the Worker and the object.
  app.post('/link/v1/cancel', async (c) => {
    const { invocationId } = (await c.req.json()) as { invocationId?: string };
    const entry = invocationId ? forwarded.get(invocationId) : undefined;
    entry?.abandon();
    const waiting = invocationId ? queued.get(invocationId) : undefined;
    waiting?.wait.abort();
    if (!entry && !waiting && invocationId) {
      cancelledEarly.add(invocationId);
      if (cancelledEarly.size > MAX_EARLY_CANCELS) cancelledEarly.delete(cancelledEarly.values().next().value!);
    }
    return c.json({ cancelled: entry !== undefined }, 202);
  });

  // The cancel API, from whichever isolate answered it: the request running the workload is told to cancel it.
  app.post('/link/v1/cancel-workload', async (c) => {
    const { workloadId } = (await c.req.json()) as { workloadId?: string };
    let found = false;
    for (const entry of forwarded.values()) {
      if (entry.workloadId !== workloadId) continue;
      found = true;
      entry.run.stop(WORKLOAD_CANCELLED, 'cancelled by API');
    }
    for (const entry of queued.values()) {
      if (entry.workloadId !== workloadId) continue;
      found = true;
      entry.wait.abort(BY_API);
    }
    return c.json({ cancelled: found }, 202);
  });

  // A signal for the machine's stream (desired state, revocation, log request): delivered as the bus would.
  app.post('/link/v1/signal', async (c) => {
    const machineId = machineOf(c);
    const message = (await c.req.json()) as BusMessage;
    ports.bus.deliverLocal(`machine:${machineId}`, message);
    return c.json({ delivered: holder.hasLocalStream(machineId) }, 202);
  });

  app.post('/link/v1/channel', async (c) => {
    mailbox.put(channelOf(c.req.query('channel'), machineOf(c)), (await c.req.json()) as BusMessage);
    return c.json({ accepted: true }, 202);
  });
  app.get('/link/v1/channel', async (c) => {
    const waitMs = Math.min(Number(c.req.query('waitMs')) || 0, MAX_CHANNEL_WAIT_MS);
    const message = await mailbox.take(channelOf(c.req.query('channel'), machineOf(c)), waitMs);
    return message ? c.json(message) : c.body(null, 204);
  });
  return app;
}

/** Only this machine's log answers meet here. */
function channelOf(channel: string | undefined, machineId: string): string {
  if (!channel?.startsWith(`logs:${machineId}:`)) throw new ApiError('bad_request', 'not a channel of this machine');
  return channel;
}

/**
 * The Durable Object of one machine (`MACHINE_LINKS.idFromName(machineId)`): its link holder on Workers
 * (docs/workers.md). Its stream, its uplink and every invocation for it meet here, whichever isolate or data
 * centre the requests reached, because all requests to one object share its I/O: a write into the stream from
 * an invocation's request is allowed here, where it is not between two Worker requests. It keeps one database
 * connection (pool of one, idle longer than a keep-alive) for the stream's lease, pings and desired state.
 */
export class MachineLink {
  private readonly serve: (request: Request) => Response | Promise<Response>;

  constructor(_state: unknown, rawEnv: unknown) {
    const parsed = parseWorkerEnv(rawEnv);
    if (!parsed.ok) {
      this.serve = () => invalidEnvResponse(parsed);
      return;
    }
    const { env } = parsed;
    const base = edgeConfig(env);
    const config = {
      ...base,
      // Renewed by the stream's keep-alives (an object runs no timers of its own when idle): it must outlive their gap.
      instanceLeaseTtlMs: 3 * base.streamKeepAliveMs,
      // Ping answers are recorded for routing at most once a second, on the object's one connection.
      writeBehindMs: 1_000,
    };
    const store = openNeonStore(env.DATABASE_URL, {
      wsProxy: env.NEON_WS_PROXY,
      sqlEndpoint: env.NEON_SQL_ENDPOINT,
      max: 1,
      idleTimeoutMs: 3 * config.streamKeepAliveMs,
    });
    const ports = edgePorts({ env, config, store, bus: createMemoryBus(), remote: null });
    const app = linkApp(ports, new Mailbox());
    this.serve = (request) => app.fetch(request);
  }

  fetch(request: Request): Response | Promise<Response> {
    return this.serve(request);
  }
}
