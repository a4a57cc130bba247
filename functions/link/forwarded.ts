import { type Frame, type Invoke, Lane } from '../../shared/contracts/relay.js';
import { encodeFrame, FrameDecoder } from '../../shared/frame-codec.js';
import { turnBatch } from '../../shared/turn-batch.js';
import type { DispatchOptions, FrameSink, LinkHolder } from './holder.js';

/**
 * A forwarded invocation (docs/design.md section 5, step 3): the caller sends `invoke` as JSON to the link holder
 * (another instance over the peer channel on Node, the machine's Durable Object on Workers), and the holder
 * answers with the invocation's frames, binary as on the uplink. A failure that is not a frame of the node (the
 * node or its link went away) travels as an `error` frame at this offset.
 */
export const FORWARDED_FAILED_OFFSET = 0xffffffff;
/** The media type of a forwarded invocation's answer. */
export const FRAMES_TYPE = 'application/vnd.lunanexa.frames';
/** The header naming the machine a forwarded request is for; whoever forwards it authenticated the machine. */
export const MACHINE_HEADER = 'x-lunanexa-machine';

/** The replica's concurrency, which the holder enforces for every instance (or isolate) together. */
const CONCURRENCY_HEADER = 'x-lunanexa-concurrency';
/** The lane the invocation waits in for one of the replica's slots at the holder. */
const LANE_HEADER = 'x-lunanexa-lane';

/** The headers that ask the holder to admit a forwarded invocation under `opts`. */
export function admissionHeaders(opts: DispatchOptions | undefined): Record<string, string> {
  return { [CONCURRENCY_HEADER]: String(opts?.concurrency ?? 0), [LANE_HEADER]: opts?.lane ?? 'interactive' };
}

/**
 * What the caller asked the holder to admit its invocation under (`admissionHeaders`): a concurrency that is not
 * a positive number bounds nothing, and an unknown lane is the interactive one.
 */
export function admissionOf(header: (name: string) => string | undefined): DispatchOptions {
  const concurrency = Number(header(CONCURRENCY_HEADER));
  const lane = Lane.safeParse(header(LANE_HEADER));
  return { concurrency: concurrency > 0 ? concurrency : Number.POSITIVE_INFINITY, lane: lane.success ? lane.data : 'interactive' };
}

/** Where the holder writes the frames of a forwarded invocation. */
export interface ForwardedOut {
  write(chunks: Uint8Array[]): void;
  end(): void;
  /** Null while the caller's connection takes more; else settles once it drained. Absent: it always takes more. */
  ready?(): Promise<void> | null;
}

/**
 * The holder's half: dispatches `invoke` to the machine whose link is held here and writes its frames to `out`,
 * those of one event-loop turn in one write. `gone` is what the caller going away calls: the invocation is
 * cancelled on the node; `stop` ends it from the holder's side. `done` tells whether the last frame was written
 * (or the caller went). A paced invocation (`invoke.window`) is credited as its frames leave for the caller: what
 * the caller's connection does not take holds the node back, here as on the instance that forwarded it.
 * `onFirstData` is called as the answer's first body bytes arrive (the holder's measure of the replica's TTFT).
 */
export function serveForwarded(
  holder: LinkHolder,
  invoke: Invoke,
  machineId: string,
  out: ForwardedOut,
  onFirstData: () => void = () => {},
): { dispatched: Promise<void>; gone(): void; stop(code: string, message: string): void; done(): boolean } {
  let done = false;
  let firstData = false;
  /** Data bytes written to the caller and not yet passed on (credited): they wait for its connection to drain. */
  let unpaced = 0;
  let draining = false;
  const passOn = () => {
    if (unpaced === 0 || draining || !sink.onPassedOn) return;
    const ready = out.ready?.() ?? null;
    if (ready === null) {
      const bytes = unpaced;
      unpaced = 0;
      sink.onPassedOn(bytes);
      return;
    }
    draining = true;
    void ready.then(() => {
      draining = false;
      passOn();
    });
  };
  const batch = turnBatch<Uint8Array>((chunks) => {
    out.write(chunks);
    if (done) out.end();
    else passOn();
  });
  const send = (frame: Frame) => batch.push(encodeFrame(invoke.invocationId, frame));
  const sink: FrameSink = {
    window: invoke.window,
    onPassedOn: null,
    frame(frame) {
      if (done) return;
      if (frame.t === 'end' || frame.t === 'error') done = true;
      else if (frame.t === 'data' && frame.d.length > 0) {
        if (!firstData) {
          firstData = true;
          onFirstData();
        }
        unpaced += frame.d.length;
      }
      send(frame);
    },
    fail(code, message) {
      if (done) return;
      done = true;
      send({ o: FORWARDED_FAILED_OFFSET, t: 'error', code, message });
    },
  };
  return {
    dispatched: holder.dispatch(invoke, machineId, sink),
    gone() {
      if (done) return;
      done = true;
      holder.cancel(invoke.invocationId, machineId, 'cancelled');
      holder.release(invoke.invocationId);
    },
    /** Ends the invocation here with a failure the caller is told (`code`), and cancels it on the node. */
    stop(code, message) {
      if (done) return;
      sink.fail(code, message);
      holder.cancel(invoke.invocationId, machineId, 'cancelled');
      holder.release(invoke.invocationId);
    },
    done: () => done,
  };
}

/**
 * The caller's half: reads the holder's answer into `sink` until it ends. An answer that breaks off before its
 * last frame fails the invocation (`holder_lost`) unless `aborted()` says the caller stopped it itself. A paced
 * sink that is full stops the reading, so that the holder's writes wait and its node is not credited.
 */
export async function readForwarded(body: AsyncIterable<Uint8Array>, sink: FrameSink, aborted: () => boolean): Promise<void> {
  let finished = false;
  const decoder = new FrameDecoder({
    frame: (_id, frame) => {
      if (frame.t === 'end' || frame.t === 'error') finished = true;
      if (frame.t === 'error' && frame.o === FORWARDED_FAILED_OFFSET) sink.fail(frame.code, frame.message);
      else sink.frame(frame);
    },
    control: () => {},
  });
  try {
    for await (const chunk of body) {
      decoder.push(chunk);
      const room = sink.room?.();
      if (room) await room;
    }
  } catch {
    // Aborted by the caller, or the holder went away: told below unless the invocation is over.
  }
  if (!finished && !aborted()) sink.fail('holder_lost', 'the link holder of the node went away');
}
