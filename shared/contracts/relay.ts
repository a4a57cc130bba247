import { z } from 'zod';

/** The inference endpoints a runtime serves; the relay forwards exactly these paths. */
export const InferencePath = z.enum(['/v1/chat/completions', '/v1/completions', '/v1/embeddings']);
export type InferencePath = z.infer<typeof InferencePath>;

/**
 * The `invoke` event: one canonical workload's request to a runtime of this machine. The payload crosses
 * inline over the node's own stream; it is never logged.
 */
export const Invoke = z.object({
  invocationId: z.string(),
  workloadId: z.string(),
  assignmentId: z.string(),
  path: InferencePath,
  /** The request body as the client sent it, with the model rewritten to the runtime's. */
  body: z.string(),
  /** Epoch ms after which the work is worthless; the agent and the runtime stop there. */
  deadline: z.number().int(),
  idempotencyKey: z.string().max(256).nullable(),
  stream: z.boolean(),
});
export type Invoke = z.infer<typeof Invoke>;

/**
 * One NDJSON line of POST /agent/v1/invocations/{id}/frames. Offsets count frames from 0, so an upload can
 * resume where the control plane stopped receiving. `data` carries the runtime's bytes verbatim (already
 * SSE-framed for streams): the relay moves them in batches, it does not parse tokens.
 */
export const Frame = z.discriminatedUnion('t', [
  z.object({ o: z.number().int().nonnegative(), t: z.literal('head'), status: z.number().int(), contentType: z.string().max(200) }),
  z.object({ o: z.number().int().nonnegative(), t: z.literal('data'), d: z.string() }),
  z.object({ o: z.number().int().nonnegative(), t: z.literal('end'), tokens: z.number().int().nonnegative() }),
  z.object({
    o: z.number().int().nonnegative(),
    t: z.literal('error'),
    code: z.string().max(100),
    message: z.string().max(500),
    /** The runtime's own bytes already carried an error event to the client: record the failure, add nothing. */
    told: z.boolean().optional(),
  }),
]);
export type Frame = z.infer<typeof Frame>;

export const FramesAccepted = z.object({ nextOffset: z.number().int().nonnegative() });
export type FramesAccepted = z.infer<typeof FramesAccepted>;
