import { z } from 'zod';
import { Invoke } from './relay.js';
import { UplinkAck, UplinkConfirmed, UplinkCredit } from './uplink.js';

/** Version of the SSE catalogue; sent in the `hello` event so agents can refuse what they do not speak. */
export const STREAM_PROTOCOL_VERSION = 1;

/**
 * The SSE catalogue of GET /agent/v1/stream: event name -> data schema.
 * `desired` carries a compact JWS whose claims are `DesiredState`.
 */
export const StreamEvents = {
  hello: z.object({ protocol: z.number().int(), machineId: z.string(), connectionId: z.string(), keepAliveMs: z.number().int() }),
  desired: z.object({ jws: z.string() }),
  revoked: z.object({ reason: z.string() }),
  invoke: Invoke,
  cancel: z.object({ invocationId: z.string(), reason: z.string() }),
  /** Proof of life asked of the agent: it answers with `POST /agent/v1/pong` (`PingAnswer`) while it is not frozen. */
  ping: z.object({ seq: z.number().int().nonnegative() }),
  /** The agent's uplink is bound to this stream (see `UplinkConfirmed`). */
  uplink: UplinkConfirmed,
  /** Uplink progress (see `UplinkAck`). */
  ack: UplinkAck,
  /** Flow control: what the holder passed on of each invocation's answer (see `UplinkCredit`). */
  credit: UplinkCredit,
  /** Asks the agent to upload the tail of a runtime's log ring under `requestId`. */
  logs: z.object({ requestId: z.string(), assignmentId: z.string(), lines: z.number().int().positive().max(1_000) }),
} as const;
type StreamEventName = keyof typeof StreamEvents;
/** A parsed stream message, discriminated by event name. */
export type StreamEvent = { [N in StreamEventName]: { event: N; data: z.infer<(typeof StreamEvents)[N]> } }[StreamEventName];

/** Parses one SSE message against the catalogue; unknown events and bad data are errors the caller counts. */
export function parseStreamEvent(event: string, data: string): { success: true; value: StreamEvent } | { success: false; error: string } {
  if (!Object.hasOwn(StreamEvents, event)) return { success: false, error: `unknown event ${event}` };
  let json: unknown;
  try {
    json = JSON.parse(data);
  } catch {
    return { success: false, error: `event ${event} carries invalid JSON` };
  }
  const name = event as StreamEventName;
  const parsed = StreamEvents[name].safeParse(json);
  if (!parsed.success) return { success: false, error: `event ${event}: ${parsed.error.issues[0]?.message ?? 'invalid'}` };
  return { success: true, value: { event: name, data: parsed.data } as StreamEvent };
}

/** Body of POST /agent/v1/runtimes/{assignmentId}/logs: the answer to a `logs` event. */
export const LogUpload = z.object({
  requestId: z.string().max(64),
  lines: z.array(z.string().max(4096)).max(1_000),
});
export type LogUpload = z.infer<typeof LogUpload>;

/** Body of POST /agent/v1/pong: the answer to a `ping` on the stream `connectionId` (from `hello`). */
export const PingAnswer = z.object({
  connectionId: z.string().min(1).max(64),
  seq: z.number().int().nonnegative(),
});
export type PingAnswer = z.infer<typeof PingAnswer>;

/** Answer of POST /agent/v1/pong: false when that stream no longer holds the machine's link (a newer one does). */
export const PingAnswered = z.object({ answered: z.boolean() });
export type PingAnswered = z.infer<typeof PingAnswered>;

/** Answer of POST /agent/v1/runtimes/{assignmentId}/logs. */
export const LogUploadAccepted = z.object({ accepted: z.literal(true) });
export type LogUploadAccepted = z.infer<typeof LogUploadAccepted>;
