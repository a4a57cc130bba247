import { FrameDecoder, FrameError } from '../../shared/frame-codec.js';
import { ApiError } from '../kernel/errors.js';
import type { FrameAcceptance, LinkHolder } from './holder.js';

/** How often, at most, an uplink's progress is acknowledged down the stream. */
const ACK_EVERY_MS = 50;

export type IngestRefusal =
  /** Not frames of this protocol (or a frame over the limit, or a body ending inside a frame): the upload ends. */
  | { kind: 'malformed'; message: string }
  /** The body broke off (the agent's connection): frames read so far count, the agent resends the rest. */
  | { kind: 'interrupted' }
  /** Frames of another machine's invocation: the upload ends. */
  | { kind: 'not_yours'; invocationId: string }
  /** Per-invocation upload: its invocation is unknown here (finished, cancelled) or its frames are not its own. */
  | { kind: 'unknown'; invocationId: string };

export class IngestRefused extends Error {
  constructor(readonly refusal: IngestRefusal) {
    super(refusal.kind);
  }
}

export interface IngestOptions {
  frameMaxBytes: number;
  /** A per-invocation upload: frames of this invocation only, and an unknown invocation refuses the upload. */
  only?: string;
  /** The next offset expected when the upload starts (a resumed per-invocation upload). */
  from?: number;
  /** Stops reading (the machine's stream detached): the caller ends the body. */
  signal?: AbortSignal;
}

/**
 * Reads an agent's frames (an uplink, or one invocation's upload) into the link holder, on the instance holding
 * the machine's stream. Each frame goes straight to its invocation's sink; an uplink's progress is acknowledged
 * down the stream (per invocation, the next offset expected) at most every `ACK_EVERY_MS`, so that a broken
 * uplink resumes from there. On an uplink, frames of an invocation unknown here (finished, cancelled, from a
 * stream that is gone) are acknowledged and the agent is told once to stop it. Resolves with the next offset of
 * the upload's invocation (per-invocation) when the body ends; throws `IngestRefused`.
 */
export async function ingestFrames(holder: LinkHolder, machineId: string, chunks: AsyncIterable<Uint8Array>, opts: IngestOptions): Promise<number> {
  const acks = new Map<string, number>();
  const stopped = new Set<string>();
  let ackTimer: ReturnType<typeof setTimeout> | undefined;
  let nextOffset = opts.from ?? 0;
  const flushAcks = () => {
    ackTimer = undefined;
    if (acks.size === 0) return;
    holder.stream(machineId)?.ack(acks);
    acks.clear();
  };
  const refuse = (refusal: IngestRefusal): never => {
    throw new IngestRefused(refusal);
  };
  const decoder = new FrameDecoder(
    {
      frame(invocationId, frame) {
        if (opts.only !== undefined && invocationId !== opts.only) refuse({ kind: 'unknown', invocationId });
        const accepted: FrameAcceptance = holder.accept(machineId, invocationId, frame);
        if (accepted.ok) {
          nextOffset = accepted.nextOffset;
          if (opts.only !== undefined || accepted.duplicate) return;
          acks.set(invocationId, accepted.nextOffset);
          ackTimer ??= setTimeout(flushAcks, ACK_EVERY_MS);
          return;
        }
        if (accepted.reason === 'not_yours') refuse({ kind: 'not_yours', invocationId });
        if (opts.only !== undefined) refuse({ kind: 'unknown', invocationId });
        // Nobody waits for it any more: forget it on both sides (never acknowledging less than already said).
        acks.set(invocationId, Math.max(acks.get(invocationId) ?? 0, frame.o + 1));
        ackTimer ??= setTimeout(flushAcks, ACK_EVERY_MS);
        if (!stopped.has(invocationId)) {
          stopped.add(invocationId);
          holder.stream(machineId)?.cancel(invocationId, 'unknown_invocation');
        }
      },
      control(control) {
        const stream = holder.stream(machineId);
        if (control.t === 'hello') stream?.confirmUplink(control.uplinkId);
        else stream?.pong();
      },
    },
    opts.frameMaxBytes,
  );
  try {
    for await (const chunk of chunks) {
      if (opts.signal?.aborted) break;
      decoder.push(chunk);
    }
  } catch (error) {
    if (error instanceof FrameError) refuse({ kind: 'malformed', message: error.message });
    // Refusals (ours, or the body's own limit) stand; anything else is the body breaking off.
    if (error instanceof IngestRefused || error instanceof ApiError) throw error;
    refuse({ kind: 'interrupted' });
  } finally {
    clearTimeout(ackTimer);
    flushAcks();
  }
  if (decoder.buffered > 0 && !opts.signal?.aborted)
    refuse({ kind: 'malformed', message: `the upload ended inside a frame (${decoder.buffered} bytes of it)` });
  return nextOffset;
}
