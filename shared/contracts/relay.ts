import { z } from 'zod';

/** The inference endpoints a runtime serves; the relay forwards exactly these paths. */
export const InferencePath = z.enum(['/v1/chat/completions', '/v1/completions', '/v1/embeddings']);
export type InferencePath = z.infer<typeof InferencePath>;

/**
 * Which queue of a replica an invocation waits in at its link holder: `batch` rows (a job's runner marks them)
 * take a freed slot only when no `interactive` request waits for it (docs/jobs.md, "Batch rows and interactive
 * traffic"). A forwarded invocation names its lane to the holder that admits it.
 */
export const Lane = z.enum(['interactive', 'batch']);
export type Lane = z.infer<typeof Lane>;

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
  /**
   * Flow control (docs/relay.md, "Memory"): bytes of the answer's data the agent may have sent beyond what the link
   * holder has credited (`credit` events), so that a client that stops reading stops the runtime being read.
   * Absent: the holder takes the answer as fast as it comes (it is held whole, or bounded by the relay budget).
   */
  window: z.number().int().positive().optional(),
});
export type Invoke = z.infer<typeof Invoke>;

/**
 * One frame of an invocation's answer, as the agent sends it up (docs/design.md section 5, step 5). Offsets count
 * an invocation's frames from 0, so that a broken upload resumes where the control plane stopped receiving.
 * `accept` (always offset 0) says the agent has the invoke, before the runtime answers. `data` carries the
 * runtime's bytes untouched (already SSE-framed for streams): the relay moves them, it never parses tokens.
 * On the wire frames are binary (`shared/frame-codec.ts`): no JSON and no schema per frame.
 */
export type Frame =
  | { o: number; t: 'accept' }
  | { o: number; t: 'head'; status: number; contentType: string }
  | { o: number; t: 'data'; d: Uint8Array }
  | {
      o: number;
      t: 'end';
      /** Events the agent counted in a streamed answer, `[DONE]` excluded (0 for a whole answer). */
      tokens: number;
      /** The runtime's own `usage` (`prompt_tokens`, `completion_tokens`): null when it sent none, or an older agent. */
      promptTokens: number | null;
      completionTokens: number | null;
    }
  | {
      o: number;
      t: 'error';
      code: string;
      message: string;
      /** The runtime's own bytes already carried an error event to the client: record the failure, add nothing. */
      told?: boolean;
    };

/** Answer of a per-invocation frames upload (and of its GET): the next offset the control plane expects. */
export const FramesAccepted = z.object({ nextOffset: z.number().int().nonnegative() });
export type FramesAccepted = z.infer<typeof FramesAccepted>;
