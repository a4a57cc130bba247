import type { Invoke } from '../../shared/contracts/relay.js';
import type { MachinePrincipal } from '../core/principals.js';
import type { DispatchOptions, FrameSink, PipedAnswer, RemoteHolders } from './holder.js';
import { admissionHeaders, MACHINE_HEADER, readForwarded } from './forwarded.js';
import { readerChunks } from '../kernel/web-streams.js';

/** A Durable Object stub: what the Worker calls a machine's object through. */
export interface LinkStub {
  fetch(input: string, init?: RequestInit): Promise<Response>;
}

/** The `MACHINE_LINKS` binding (no @cloudflare/workers-types dependency). */
export interface LinkNamespace {
  idFromName(name: string): unknown;
  get(id: unknown): LinkStub;
}

/** The origin of requests to a machine's object; it is never resolved, only routed by the stub. */
export const LINK_ORIGIN = 'https://machine-link.internal';
/** The authenticated machine, for the object: the Worker verified it before handing the request over. */
export const PRINCIPAL_HEADER = 'x-lunanexa-principal';
/** The failure code an object answers a forwarded invocation with when the cancel API cancelled its workload. */
export const WORKLOAD_CANCELLED = 'workload_cancelled';

export function linkStub(namespace: LinkNamespace, machineId: string): LinkStub {
  return namespace.get(namespace.idFromName(machineId));
}

function principalHeaders(machine: MachinePrincipal): Record<string, string> {
  return {
    [MACHINE_HEADER]: machine.machineId,
    [PRINCIPAL_HEADER]: JSON.stringify({ ...machine, credentialExpiresAt: machine.credentialExpiresAt.toISOString() }),
  };
}

/** An async iterable as a request body a stub accepts. */
function streamOf(chunks: AsyncIterable<Uint8Array>): ReadableStream<Uint8Array> {
  const iterator = chunks[Symbol.asyncIterator]();
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      const next = await iterator.next();
      if (next.done) controller.close();
      else controller.enqueue(next.value);
    },
    async cancel() {
      await iterator.return?.();
    },
  });
}

/**
 * The link holder on Workers (docs/design.md section 5; docs/workers.md): one Durable Object per machine
 * (`idFromName(machineId)`) holds its stream and uplink. A Worker request never holds either: it authenticates
 * the agent and hands the stream and uploads to the object, and forwards each invocation there whole, reading the
 * answer's frames as the object streams them back.
 */
export class DurableHolders implements RemoteHolders {
  /** Stops each running forwarded invocation: its answer's stream is cancelled, which the object sees. */
  private readonly running = new Map<string, () => void>();

  constructor(
    private readonly namespace: LinkNamespace,
    private readonly hooks: {
      /** The current request's `ctx.waitUntil`: keeps it alive until a cancel has reached the object. */
      keepAlive(): (work: Promise<unknown>) => void;
      /** The object says the cancel API cancelled this workload: the request running it cancels it. */
      workloadCancelled(workloadId: string): void;
    },
  ) {}

  async forward(invoke: Invoke, machineId: string, sink: FrameSink, opts?: DispatchOptions): Promise<void> {
    const controller = new AbortController();
    // Taken now: a cancel comes from an abort listener or a timer, outside the request's own context. Said
    // explicitly as well as by aborting: neither an aborted request nor a cancelled answer crosses every proxy
    // between the isolate and the object, and the object may not have answered yet.
    const keepAlive = this.hooks.keepAlive();
    // Silent by design: the explicit cancel is the second of two signals; if it cannot reach the object, the aborted
    // request (or its answer, cancelled below) still ends the invocation there.
    const tellObject = () => keepAlive(this.post(machineId, '/link/v1/cancel', { invocationId: invoke.invocationId }).catch(() => {}));
    this.running.set(invoke.invocationId, () => {
      controller.abort();
      tellObject();
    });
    let response: Response;
    try {
      response = await linkStub(this.namespace, machineId).fetch(`${LINK_ORIGIN}/link/v1/invoke`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', [MACHINE_HEADER]: machineId, ...admissionHeaders(opts) },
        body: JSON.stringify(invoke),
        signal: controller.signal,
      });
    } catch (error) {
      this.running.delete(invoke.invocationId);
      throw error;
    }
    if (response.status !== 200 || !response.body) {
      // Silent by design: the body only adds detail to the refusal thrown below, which names the status either way.
      const text = await response.text().catch(() => '');
      this.running.delete(invoke.invocationId);
      throw new Error(`the machine's link refused the invocation (HTTP ${response.status}${text ? `: ${text.slice(0, 200)}` : ''})`);
    }
    const reader = response.body.getReader();
    this.running.set(invoke.invocationId, () => {
      controller.abort();
      // Aborting the request does not reach an answer already streaming: cancelling its body does.
      // Silent by design: cancelling an answer that already ended or failed can only fail, and changes nothing.
      void reader.cancel('cancelled').catch(() => {});
      tellObject();
    });
    // Once its last frame is here the invocation is over, and the holder's release must not post a cancel for it.
    const ended = () => this.running.delete(invoke.invocationId);
    const relayed: FrameSink = {
      room: () => sink.room?.() ?? null,
      frame: (frame) => {
        if (frame.t === 'end' || frame.t === 'error') ended();
        sink.frame(frame);
      },
      fail: (code, message) => {
        ended();
        if (code === WORKLOAD_CANCELLED) this.hooks.workloadCancelled(invoke.workloadId);
        else sink.fail(code, message);
      },
    };
    void readForwarded(readerChunks(reader), relayed, () => controller.signal.aborted).finally(() => this.running.delete(invoke.invocationId));
  }

  cancel(invocationId: string): void {
    // Cancelling the answer's stream reaches the object, which cancels the invocation on the node.
    this.running.get(invocationId)?.();
    this.running.delete(invocationId);
  }

  /** Asks every object holding a link to cancel `workloadId` (its machine is not recorded until it finishes). */
  async cancelWorkload(machineIds: readonly string[], workloadId: string): Promise<void> {
    await Promise.all(machineIds.map((machineId) => this.post(machineId, '/link/v1/cancel-workload', { workloadId })));
  }

  /** One request to the machine's object (a signal, a cancel): JSON in, refused unless 2xx. */
  async post(machineId: string, path: string, body: unknown): Promise<void> {
    const response = await linkStub(this.namespace, machineId).fetch(`${LINK_ORIGIN}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', [MACHINE_HEADER]: machineId },
      body: JSON.stringify(body),
    });
    await response.body?.cancel();
    if (!response.ok) throw new Error(`the machine's link refused ${path} (HTTP ${response.status})`);
  }

  async pipe(machine: MachinePrincipal, method: 'GET' | 'POST', path: string, body: AsyncIterable<Uint8Array> | null): Promise<PipedAnswer | null> {
    const response = await linkStub(this.namespace, machine.machineId).fetch(`${LINK_ORIGIN}/agent/v1${path}`, {
      method,
      headers: { ...principalHeaders(machine), 'content-type': 'application/octet-stream' },
      body: body ? streamOf(body) : null,
      ...(body ? { duplex: 'half' } : {}),
    } as RequestInit);
    return { status: response.status, body: await response.text() };
  }

  holdStream(machine: MachinePrincipal, request: Request): Promise<Response> {
    const lastEventId = request.headers.get('last-event-id');
    return linkStub(this.namespace, machine.machineId).fetch(`${LINK_ORIGIN}/agent/v1/stream`, {
      headers: { ...principalHeaders(machine), ...(lastEventId ? { 'last-event-id': lastEventId } : {}) },
    });
  }
}
