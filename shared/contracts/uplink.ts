import { z } from 'zod';

/** Answer of POST /agent/v1/uplink once its body ended: the agent opens the next one when it needs one. */
export const UplinkClosed = z.object({ closed: z.literal(true) });
export type UplinkClosed = z.infer<typeof UplinkClosed>;

/** Stream event `uplink`: the uplink whose `hello` frame named this id is bound to the stream; frames may go on it. */
export const UplinkConfirmed = z.object({ uplinkId: z.string().min(1).max(64) });
export type UplinkConfirmed = z.infer<typeof UplinkConfirmed>;

/**
 * Stream event `ack`: per invocation, the next frame offset the link holder expects. Frames below it arrived and
 * need not be kept for a resend; an invocation the holder no longer knows is acknowledged past its last frame.
 */
export const UplinkAck = z.object({ offsets: z.record(z.string().max(255), z.number().int().nonnegative()) });
export type UplinkAck = z.infer<typeof UplinkAck>;

/**
 * Stream event `credit`: per invocation, the bytes of its data frames the link holder has passed on toward the
 * client so far (a running total, so a lost or repeated event does no harm). The agent keeps what it sent beyond
 * that within the invocation's `window`, and stops reading the runtime at it.
 */
export const UplinkCredit = z.object({ credits: z.record(z.string().max(255), z.number().int().nonnegative()) });
export type UplinkCredit = z.infer<typeof UplinkCredit>;
