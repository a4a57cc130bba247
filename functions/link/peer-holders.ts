import { Agent, request } from 'undici';
import type { Invoke } from '../../shared/contracts/relay.js';
import type { Db } from '../store/db.js';
import { linkHolderOf } from '../services/instances.js';
import type { DispatchOptions, FrameSink, PipedAnswer, RemoteHolders } from './holder.js';
import type { PeerAuth, PeerRequest } from './peer-auth.js';
import type { MachinePrincipal } from '../core/principals.js';
import { admissionHeaders, MACHINE_HEADER, readForwarded } from './forwarded.js';
/** How long who holds a machine's link is remembered; a refused forward forgets it at once. */
const HOLDER_TTL_MS = 1_000;

interface Holder {
  instanceId: string;
  peerUrl: string | null;
}

/** What a peer token binds: the request target as undici sends it (the URL's path and query, normalised). */
function bound(method: string, url: URL, machineId: string): PeerRequest {
  return { method, path: `${url.pathname}${url.search}`, machineId };
}

/**
 * The client half of the peer channel (Node): an invocation for a machine whose link another instance holds is
 * forwarded there whole, and its frames stream back on the answer; an agent upload that landed here is piped to
 * the holder the same way. Who holds which link is the store's truth (`stream_leases` and the holder's lease).
 */
export class PeerHolders implements RemoteHolders {
  private readonly dispatcher: Agent;
  private readonly running = new Map<string, AbortController>();
  private readonly holders = new Map<string, { holder: Holder | null; at: number }>();

  /** `ca`: the certificates (PEM) that peers' HTTPS listeners are checked against, instead of the system's. */
  constructor(private readonly deps: { instanceId: string; auth: PeerAuth; db: () => Db; ca?: string }) {
    this.dispatcher = new Agent({ keepAliveTimeout: 30_000, connect: deps.ca ? { ca: deps.ca } : undefined });
  }

  private async holder(machineId: string): Promise<Holder | null> {
    const cached = this.holders.get(machineId);
    if (cached && Date.now() - cached.at < HOLDER_TTL_MS) return cached.holder;
    const holder = await linkHolderOf(this.deps.db(), machineId);
    this.holders.set(machineId, { holder, at: Date.now() });
    return holder;
  }

  /** The peer channel of the instance holding `machineId`'s link, other than this one; null when there is none. */
  private async target(machineId: string): Promise<{ url: string; instanceId: string } | null> {
    const holder = await this.holder(machineId);
    if (!holder?.peerUrl || holder.instanceId === this.deps.instanceId) return null;
    return { url: holder.peerUrl, instanceId: holder.instanceId };
  }

  async forward(invoke: Invoke, machineId: string, sink: FrameSink, opts?: DispatchOptions): Promise<void> {
    const target = await this.target(machineId);
    if (!target) throw new Error('no instance holds the node stream');
    const controller = new AbortController();
    this.running.set(invoke.invocationId, controller);
    // Refused or unreachable: the holder may have changed, so it is looked up again next time.
    const forget = () => {
      this.running.delete(invoke.invocationId);
      this.holders.delete(machineId);
    };
    let response: Awaited<ReturnType<typeof request>>;
    try {
      const url = new URL(`${target.url}/peer/v1/invoke`);
      const authorization = await this.deps.auth.header(target.instanceId, bound('POST', url, machineId), invoke.invocationId);
      response = await request(url, {
        method: 'POST',
        headers: { authorization, 'content-type': 'application/json', [MACHINE_HEADER]: machineId, ...admissionHeaders(opts) },
        body: JSON.stringify(invoke),
        signal: controller.signal,
        dispatcher: this.dispatcher,
      });
    } catch (error) {
      forget();
      throw error;
    }
    if (response.statusCode !== 200) {
      // Silent by design: draining the refusal's body only frees the connection; the refusal is thrown just below.
      await response.body.dump().catch(() => {});
      forget();
      throw new Error(`the link holder refused the invocation (HTTP ${response.statusCode})`);
    }
    void readForwarded(response.body as AsyncIterable<Uint8Array>, sink, () => controller.signal.aborted).finally(() =>
      this.running.delete(invoke.invocationId),
    );
  }

  cancel(invocationId: string): void {
    this.running.get(invocationId)?.abort();
    this.running.delete(invocationId);
  }

  /**
   * Pipes an agent upload for `machineId` (its uplink, or one invocation's frames) to the instance holding the
   * machine's link; `path` is the agent path under `/agent/v1`. Null when no other live instance holds it.
   */
  async pipe(machine: MachinePrincipal, method: 'GET' | 'POST', path: string, body: AsyncIterable<Uint8Array> | null): Promise<PipedAnswer | null> {
    const { machineId } = machine;
    const target = await this.target(machineId);
    if (!target) return null;
    try {
      const url = new URL(`${target.url}/peer/v1/agent${path}`);
      const authorization = await this.deps.auth.header(target.instanceId, bound(method, url, machineId));
      const response = await request(url, {
        method,
        headers: { authorization, [MACHINE_HEADER]: machineId, 'content-type': 'application/octet-stream' },
        // undici streams an async iterable as a chunked body; its typings only name Readable.
        body: body as unknown as string | null,
        dispatcher: this.dispatcher,
      });
      return { status: response.statusCode, body: await response.body.text() };
    } catch (error) {
      this.holders.delete(machineId);
      throw error;
    }
  }

  async close(): Promise<void> {
    for (const controller of this.running.values()) controller.abort();
    await this.dispatcher.close();
  }
}
