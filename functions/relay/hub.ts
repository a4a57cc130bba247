import { sql } from 'drizzle-orm';
import type { Frame, Invoke } from '../../shared/contracts/relay.js';
import { invocationPayloads } from '../store/schema/index.js';
import type { Db } from '../store/db.js';
import { takePayloads } from '../services/payloads.js';
import { MAX_NOTIFY_BYTES, type Bus, type BusMessage } from './bus.js';
import type { FrameQueue } from './frame-queue.js';

/** How a local agent stream receives relay events. */
export interface StreamSink {
  invoke(invoke: Invoke): void;
  cancel(invocationId: string, reason: string): void;
}

interface Dispatched {
  machineId: string;
  nextOffset: number;
}

export type FrameAcceptance = { ok: true; nextOffset: number } | { ok: false; reason: 'unknown' | 'not_yours' };

/**
 * The relay of one control-plane instance (docs/design.md section 5, steps 3-4). The instance holding the
 * client's request waits on a `FrameQueue`; the instance holding the node's stream sends `invoke` and
 * receives the node's frames. When both are this instance, everything stays in memory; otherwise the
 * payload crosses through `invocation_payloads` (deleted on pickup, with a receipt) and frames and
 * signals through the bus.
 */
export class InvocationHub {
  private readonly streams = new Map<string, StreamSink>();
  private readonly waiters = new Map<string, { queue: FrameQueue; unsubscribe?: () => void }>();
  private readonly dispatched = new Map<string, Dispatched>();

  constructor(
    private readonly bus: Bus,
    /** Read per use: on Workers the store belongs to the current request. */
    private readonly dbOf: () => Db,
  ) {}

  hasLocalStream(machineId: string): boolean {
    return this.streams.has(machineId);
  }

  /** Registers a local stream; on detach every invocation still running through it fails. */
  attachStream(machineId: string, sink: StreamSink): () => void {
    this.streams.set(machineId, sink);
    return () => {
      if (this.streams.get(machineId) === sink) this.streams.delete(machineId);
      for (const [invocationId, entry] of this.dispatched) {
        if (entry.machineId !== machineId) continue;
        this.dispatched.delete(invocationId);
        this.route(invocationId, { type: 'failed', code: 'node_lost', message: 'the node running this request disconnected' });
      }
    };
  }

  /** Client side: sends `invoke` to the machine, locally or through the instance holding its stream. */
  async dispatch(invoke: Invoke, machineId: string, queue: FrameQueue): Promise<void> {
    const waiter: { queue: FrameQueue; unsubscribe?: () => void } = { queue };
    this.waiters.set(invoke.invocationId, waiter);
    const local = this.streams.get(machineId);
    if (local) {
      this.dispatched.set(invoke.invocationId, { machineId, nextOffset: 0 });
      local.invoke(invoke);
      return;
    }
    waiter.unsubscribe = this.bus.subscribe(`inv:${invoke.invocationId}`, (message) => this.deliver(invoke.invocationId, message));
    await this.dbOf().insert(invocationPayloads).values({
      invocationId: invoke.invocationId,
      machineId,
      invoke: JSON.stringify(invoke),
      expiresAt: new Date(invoke.deadline),
    });
    await this.bus.publish(`machine:${machineId}`, { type: 'invoke', invocationId: invoke.invocationId });
  }

  /** Client side: asks the node to abort the runtime call. */
  async cancel(invocationId: string, machineId: string, reason: string): Promise<void> {
    const local = this.streams.get(machineId);
    if (local) local.cancel(invocationId, reason);
    else await this.bus.publish(`machine:${machineId}`, { type: 'cancel', invocationId, reason });
  }

  /** Client side: the request is over; stop listening for its frames. */
  release(invocationId: string): void {
    const waiter = this.waiters.get(invocationId);
    waiter?.unsubscribe?.();
    this.waiters.delete(invocationId);
  }

  /** Stream side: takes a cross-instance payload out of temporary storage (deleting it) and sends `invoke`. */
  async pickup(machineId: string, invocationId: string): Promise<void> {
    const [row] = await takePayloads(this.dbOf(), sql`invocation_id = ${invocationId}`, 'pickup');
    if (!row) return;
    const sink = this.streams.get(machineId);
    if (!sink || row.machineId !== machineId) {
      this.route(invocationId, { type: 'failed', code: 'node_lost', message: 'the node stream moved before pickup' });
      return;
    }
    this.dispatched.set(invocationId, { machineId, nextOffset: 0 });
    sink.invoke(JSON.parse(row.invoke) as Invoke);
  }

  /**
   * Stream side: the machine started uploading an invocation's frames, so it has the invoke. The waiting side
   * hears it at once (an empty batch): a runtime may take long to answer a request that is not streamed.
   */
  acknowledge(machineId: string, invocationId: string): void {
    if (this.dispatched.get(invocationId)?.machineId === machineId) this.route(invocationId, { type: 'frames', frames: [] });
  }

  /** Stream side: the next frame offset this instance expects, for resuming an upload. */
  nextOffset(machineId: string, invocationId: string): FrameAcceptance {
    const entry = this.dispatched.get(invocationId);
    if (!entry) return { ok: false, reason: 'unknown' };
    if (entry.machineId !== machineId) return { ok: false, reason: 'not_yours' };
    return { ok: true, nextOffset: entry.nextOffset };
  }

  /**
   * Stream side: frames uploaded by the machine. Only the machine the invocation was sent to may upload;
   * frames below the expected offset are duplicates of a resumed upload and are dropped.
   */
  acceptFrames(machineId: string, invocationId: string, frames: Frame[]): FrameAcceptance {
    const entry = this.dispatched.get(invocationId);
    if (!entry) return { ok: false, reason: 'unknown' };
    if (entry.machineId !== machineId) return { ok: false, reason: 'not_yours' };
    const fresh = frames.filter((frame) => frame.o >= entry.nextOffset);
    if (fresh.length === 0) return { ok: true, nextOffset: entry.nextOffset };
    entry.nextOffset = fresh[fresh.length - 1]!.o + 1;
    if (fresh.some((frame) => frame.t === 'end' || frame.t === 'error')) this.dispatched.delete(invocationId);
    this.route(invocationId, { type: 'frames', frames: fresh });
    return { ok: true, nextOffset: entry.nextOffset };
  }

  private route(invocationId: string, message: Extract<BusMessage, { type: 'frames' | 'failed' }>): void {
    if (this.waiters.has(invocationId)) {
      this.deliver(invocationId, message);
      return;
    }
    for (const part of splitForBus(message)) void this.bus.publish(`inv:${invocationId}`, part).catch(() => {});
  }

  private deliver(invocationId: string, message: BusMessage): void {
    const waiter = this.waiters.get(invocationId);
    if (!waiter) return;
    if (message.type === 'frames') waiter.queue.push({ kind: 'frames', frames: message.frames });
    else if (message.type === 'failed') waiter.queue.push({ kind: 'failed', code: message.code, message: message.message });
  }
}

/** Splits a frames message into bus messages under the NOTIFY limit, cutting large data frames. */
function splitForBus(message: Extract<BusMessage, { type: 'frames' | 'failed' }>): Array<Extract<BusMessage, { type: 'frames' | 'failed' }>> {
  if (message.type === 'failed') return [message];
  const budget = MAX_NOTIFY_BYTES - 200;
  const parts: Frame[][] = [[]];
  let size = 0;
  const push = (frame: Frame, bytes: number) => {
    if (size + bytes > budget && parts[parts.length - 1]!.length > 0) {
      parts.push([]);
      size = 0;
    }
    parts[parts.length - 1]!.push(frame);
    size += bytes;
  };
  for (const frame of message.frames) {
    const bytes = Buffer.byteLength(JSON.stringify(frame));
    if (frame.t !== 'data' || bytes <= budget) {
      push(frame, bytes);
      continue;
    }
    // Escaping can grow a character to 6 bytes in JSON; cut the text small enough for the worst case.
    const step = Math.floor(budget / 6);
    for (let i = 0; i < frame.d.length; i += step) {
      const piece: Frame = { o: frame.o, t: 'data', d: frame.d.slice(i, i + step) };
      push(piece, Buffer.byteLength(JSON.stringify(piece)));
    }
  }
  return parts.map((frames) => ({ type: 'frames' as const, frames }));
}
