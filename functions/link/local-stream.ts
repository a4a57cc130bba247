import type { Invoke } from '../../shared/contracts/relay.js';
import type { LinkHolder, StreamSink } from './holder.js';
import type { StreamPings } from './stream-pings.js';

/** The events of a machine's stream, as the surface that holds its response writes them. */
export interface StreamEvents {
  event(name: string, data: string, id?: string): void;
}

/**
 * The link holder's side of a machine's stream held by this instance: invocations, cancels, uplink acks, credit and
 * confirmations go down it as events, queued at once (the hot path never waits on the store), and the stream is
 * pinged. An agent that stops answering (frozen) loses its stream: the invocations sent through it fail at once
 * and are retried elsewhere before their first byte, instead of waiting for the node to thaw.
 */
export function holdLocalStream(input: {
  holder: LinkHolder;
  pings: StreamPings;
  machineId: string;
  connectionId: string;
  out: StreamEvents;
  timing: { pingMs: number; pingTimeoutMs: number };
  /** Whether the agent's answer reached another instance, which wrote it to the stream's lease. */
  answeredElsewhere: () => Promise<boolean>;
  /** The agent answers no ping: the stream is to be closed. */
  silent: () => void;
  /** Asking whether the agent answered elsewhere failed: the next ping asks again. */
  checkFailed: (error: unknown) => void;
}): { release(): void } {
  const { holder, pings, machineId, connectionId, out } = input;
  const sink: StreamSink = {
    invoke: (invoke: Invoke) => out.event('invoke', JSON.stringify(invoke)),
    cancel: (invocationId, reason) => out.event('cancel', JSON.stringify({ invocationId, reason })),
    ack: (offsets) => out.event('ack', JSON.stringify({ offsets: Object.fromEntries(offsets) })),
    credit: (credits) => out.event('credit', JSON.stringify({ credits: Object.fromEntries(credits) })),
    confirmUplink: (uplinkId) => out.event('uplink', JSON.stringify({ uplinkId })),
    pong: () => pings.answeredOverUplink(machineId, connectionId),
  };
  const detach = holder.attachStream(machineId, sink);
  let pingSeq = 0;
  let checking = false;
  pings.start(connectionId);
  const ping = setInterval(() => {
    out.event('ping', `{"seq":${++pingSeq}}`);
    if (checking || Date.now() - pings.lastHeard(connectionId) <= input.timing.pingTimeoutMs) return;
    // Not heard here: the answer may have reached another instance, which wrote it to the lease.
    checking = true;
    void input
      .answeredElsewhere()
      .then((fresh) => (fresh ? pings.answered(connectionId) : input.silent()))
      .catch(input.checkFailed)
      .finally(() => (checking = false));
  }, input.timing.pingMs);
  return {
    release: () => {
      clearInterval(ping);
      pings.end(connectionId);
      detach();
    },
  };
}
