import type { Frame, Invoke, Lane } from '../../shared/contracts/relay.js';
import type { MachinePrincipal } from '../core/principals.js';

/** Where the frames of one invocation go, in order: the waiting request, or the peer it was forwarded from. */
export interface FrameSink {
  frame(frame: Frame): void;
  /** The invocation failed without a frame of its own saying so (its node or its link holder went away). */
  fail(code: string, message: string): void;
  /**
   * Flow control (docs/relay.md, "Memory"): the data bytes the sink takes beyond what it passed on toward the
   * client. Absent or 0: the sink takes the answer as fast as it comes (held whole, or bounded by the budget).
   */
  readonly window?: number;
  /** Set by the link holder on a paced sink: called with the data bytes the sink passed on, as it passes them. */
  onPassedOn?: ((bytes: number) => void) | null;
  /** A paced sink that is full: settles once it has room (see `FrameQueue.room`); null while it has. */
  room?(): Promise<void> | null;
}

/** How a machine's stream, held by this instance, is told things. Each call is one write to its response. */
export interface StreamSink {
  invoke(invoke: Invoke): void;
  cancel(invocationId: string, reason: string): void;
  /** Acknowledges uplink progress: per invocation, the next offset this instance expects. */
  ack(offsets: ReadonlyMap<string, number>): void;
  /** Flow control: per invocation, the data bytes passed on toward its client so far. */
  credit(credits: ReadonlyMap<string, number>): void;
  /** The uplink that said `hello` with this id is bound to the stream: the agent may send frames on it. */
  confirmUplink(uplinkId: string): void;
  /** The agent answered a ping over its uplink (instead of `POST /agent/v1/pong`). */
  pong(): void;
}

/** A machine's link held by another instance: the whole invocation is forwarded there (docs/design.md section 5). */
export interface RemoteHolders {
  /**
   * Sends `invoke` through the holder of `machineId`'s link, which admits it under `opts` (see `DispatchOptions`);
   * frames come back into `sink`. Resolves once the holder admitted it; rejects if no one holds the link, or when
   * the replica's slots stay full until the invocation's deadline.
   */
  forward(invoke: Invoke, machineId: string, sink: FrameSink, opts?: DispatchOptions): Promise<void>;
  /** Stops a forwarded invocation: its holder cancels it on the node. An id it did not forward is ignored. */
  cancel(invocationId: string): void;
  /**
   * Pipes an agent upload that landed here (its uplink, or one invocation's frames; `path` under `/agent/v1`) to
   * the instance holding the machine's link, and answers what the holder answered. Null when no other one holds it.
   */
  pipe(machine: MachinePrincipal, method: 'GET' | 'POST', path: string, body: AsyncIterable<Uint8Array> | null): Promise<PipedAnswer | null>;
  /**
   * Where streams are always held elsewhere (Workers: the machine's Durable Object), hands the authenticated
   * stream request of `machine` there and answers with what the holder streams. Absent on Node, where the
   * instance the agent reached holds its stream.
   */
  holdStream?(machine: MachinePrincipal, request: Request): Promise<Response>;
}

/**
 * What the holder of a link elsewhere admits a forwarded invocation under: the replica's concurrency, and the lane
 * it waits in for one of its slots. The holder counts the replica's slots for every instance (or isolate) that
 * sends it invocations, so that N of them run exactly what one would.
 */
export interface DispatchOptions {
  concurrency: number;
  lane: Lane;
}

/** What a piped agent upload was answered by the link holder: relayed to the agent as it is. */
export interface PipedAnswer {
  status: number;
  body: string;
}

interface Dispatched {
  machineId: string;
  nextOffset: number;
  sink: FrameSink;
  /** Flow control: the invocation's window (0: none), the data bytes its sink passed on, and what the node was told. */
  window: number;
  passedOn: number;
  credited: number;
}

/** How long, at most, credit waits to be sent with others while less than half an invocation's window is owed. */
const CREDIT_EVERY_MS = 10;

export type FrameAcceptance = { ok: true; nextOffset: number; duplicate: boolean } | { ok: false; reason: 'unknown' | 'not_yours' | 'gap' };

/**
 * The link holder of one control-plane instance (docs/design.md section 5, step 3): the one place where each
 * machine's stream, uplink and invocations meet. An invocation for a machine whose stream is held here is sent
 * down that stream and its frames, arriving on the machine's uplink (or per-invocation upload), go straight to
 * the waiting sink. One for a machine whose link another instance holds is forwarded there whole (`RemoteHolders`).
 * Payloads cross in memory and over those connections only: nothing is stored in transit.
 */
export class LinkHolder {
  private readonly streams = new Map<string, StreamSink>();
  private readonly dispatched = new Map<string, Dispatched>();
  private readonly detachHooks = new Map<string, Set<() => void>>();
  /** Credit not yet sent, per machine: per invocation, its running total. */
  private readonly owed = new Map<string, Map<string, number>>();
  private creditTimer: ReturnType<typeof setTimeout> | undefined;

  constructor(private readonly remote: RemoteHolders | null) {}

  hasLocalStream(machineId: string): boolean {
    return this.streams.has(machineId);
  }

  stream(machineId: string): StreamSink | undefined {
    return this.streams.get(machineId);
  }

  /** Registers a local stream; on detach every invocation still running through it fails, and its uplinks close. */
  attachStream(machineId: string, sink: StreamSink): () => void {
    this.streams.set(machineId, sink);
    return () => {
      if (this.streams.get(machineId) !== sink) return;
      this.streams.delete(machineId);
      const hooks = this.detachHooks.get(machineId);
      this.detachHooks.delete(machineId);
      for (const hook of hooks ?? []) hook();
      for (const [invocationId, entry] of this.dispatched) {
        if (entry.machineId !== machineId) continue;
        this.dispatched.delete(invocationId);
        entry.sink.fail('node_lost', 'the node running this request disconnected');
      }
    };
  }

  /** Runs `hook` when the machine's current stream detaches (an uplink bound to it closes then). */
  onDetach(machineId: string, hook: () => void): () => void {
    let hooks = this.detachHooks.get(machineId);
    if (!hooks) this.detachHooks.set(machineId, (hooks = new Set()));
    hooks.add(hook);
    return () => hooks.delete(hook);
  }

  /**
   * Sends `invoke` to the machine: down its stream here, or through the instance holding its link. A paced sink's
   * window travels with it; here, what the sink passes on is credited to the node down its stream.
   */
  async dispatch(invoke: Invoke, machineId: string, sink: FrameSink, opts?: DispatchOptions): Promise<void> {
    const window = sink.window ?? 0;
    const sent = window > 0 ? { ...invoke, window } : invoke;
    const local = this.streams.get(machineId);
    if (local) {
      this.dispatched.set(invoke.invocationId, { machineId, nextOffset: 0, sink, window, passedOn: 0, credited: 0 });
      if (window > 0) sink.onPassedOn = (bytes) => this.passedOn(invoke.invocationId, bytes);
      local.invoke(sent);
      return;
    }
    if (!this.remote) throw new Error('no instance holds the node stream');
    await this.remote.forward(sent, machineId, sink, opts);
  }

  private passedOn(invocationId: string, bytes: number): void {
    // Its last frame came (or it is over): the node sends nothing more that credit could free.
    const entry = this.dispatched.get(invocationId);
    if (!entry) return;
    entry.passedOn += bytes;
    let owed = this.owed.get(entry.machineId);
    if (!owed) this.owed.set(entry.machineId, (owed = new Map()));
    owed.set(invocationId, entry.passedOn);
    // Half a window owed: the node may be waiting for it, so it goes now; less rides with others a moment later.
    if (entry.passedOn - entry.credited >= entry.window / 2) this.sendCredit(entry.machineId);
    else this.creditTimer ??= setTimeout(() => this.sendAllCredit(), CREDIT_EVERY_MS);
  }

  private sendCredit(machineId: string): void {
    const owed = this.owed.get(machineId);
    if (!owed) return;
    this.owed.delete(machineId);
    for (const [invocationId, total] of owed) {
      const entry = this.dispatched.get(invocationId);
      if (entry) entry.credited = total;
    }
    this.streams.get(machineId)?.credit(owed);
  }

  private sendAllCredit(): void {
    this.creditTimer = undefined;
    for (const machineId of [...this.owed.keys()]) this.sendCredit(machineId);
  }

  /** Asks the node to abort the runtime call (best effort: a node that is gone has dropped it already). */
  cancel(invocationId: string, machineId: string, reason: string): void {
    // Down the machine's stream if it is held here, else through the holder it was forwarded to (a no-op when it
    // was not).
    this.streams.get(machineId)?.cancel(invocationId, reason);
    this.remote?.cancel(invocationId);
  }

  /** The request is over: later frames of the invocation are unknown here (the agent is told to stop). */
  release(invocationId: string): void {
    this.dispatched.delete(invocationId);
    this.remote?.cancel(invocationId);
  }

  /** See `RemoteHolders.holdStream`: null where the stream is held by the instance it reached. */
  holdStream(machine: MachinePrincipal, request: Request): Promise<Response> | null {
    return this.remote?.holdStream ? this.remote.holdStream(machine, request) : null;
  }

  /** See `RemoteHolders.pipe`; null also where there is no other holder (one instance, or the link's own object). */
  pipe(machine: MachinePrincipal, method: 'GET' | 'POST', path: string, body: AsyncIterable<Uint8Array> | null): Promise<PipedAnswer | null> {
    return this.remote ? this.remote.pipe(machine, method, path, body) : Promise.resolve(null);
  }

  /** The next frame offset this instance expects, for resuming an upload. */
  nextOffset(machineId: string, invocationId: string): FrameAcceptance {
    const entry = this.dispatched.get(invocationId);
    if (!entry) return { ok: false, reason: 'unknown' };
    if (entry.machineId !== machineId) return { ok: false, reason: 'not_yours' };
    return { ok: true, nextOffset: entry.nextOffset, duplicate: false };
  }

  /**
   * One frame from the machine. Only the machine the invocation was sent to may send its frames; a frame below
   * the expected offset is a resent duplicate and is dropped; one above it means frames were lost, which fails
   * the invocation (an agent resends contiguously from the acknowledged offset, so it never happens in order).
   */
  accept(machineId: string, invocationId: string, frame: Frame): FrameAcceptance {
    const entry = this.dispatched.get(invocationId);
    if (!entry) return { ok: false, reason: 'unknown' };
    if (entry.machineId !== machineId) return { ok: false, reason: 'not_yours' };
    if (frame.o < entry.nextOffset) return { ok: true, nextOffset: entry.nextOffset, duplicate: true };
    if (frame.o > entry.nextOffset) {
      this.dispatched.delete(invocationId);
      entry.sink.fail('frames_lost', `frames ${entry.nextOffset}..${frame.o - 1} of the answer never arrived`);
      return { ok: false, reason: 'gap' };
    }
    entry.nextOffset = frame.o + 1;
    if (frame.t === 'end' || frame.t === 'error') this.dispatched.delete(invocationId);
    entry.sink.frame(frame);
    return { ok: true, nextOffset: entry.nextOffset, duplicate: false };
  }
}
