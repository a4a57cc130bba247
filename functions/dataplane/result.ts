/**
 * What an inference ended as, for whichever surface asked: `/v1` maps it to OpenAI's envelope and status codes,
 * another surface may map it to its own. Nothing here names an HTTP status.
 */
export type InferenceErrorKind =
  /** The model is no deployment of the caller's workspace (or it was deleted while the request waited). */
  | 'not_found'
  /** Admission is full: try again shortly. */
  | 'capacity'
  /** No replica to run it on, and none coming: try again shortly. */
  | 'unavailable'
  /** The request's deadline passed. */
  | 'deadline'
  /** The client went away, or the workload was cancelled. */
  | 'cancelled'
  /** Every replica tried failed, or the one running it broke before it was done. */
  | 'bad_gateway'
  /** The Idempotency-Key already belongs to a workload: it never executes twice. */
  | 'conflict';

export interface InferenceError {
  kind: InferenceErrorKind;
  /** A stable machine-readable code (`model_not_found`, `runtime_error`, `node_lost`, ...). */
  code: string;
  message: string;
  /** When trying again is worth it, in seconds. */
  retryAfterS?: number;
  /** The workload the error is about, when it is another than the request's own (the holder of a reused key). */
  workloadId?: string;
}

/** Time a successful answer spent waiting for a replica and a slot, and on the runtime (ms). */
export interface InferenceTiming {
  queueMs: number;
  accelMs: number;
}

/** Where a streamed answer is written. The surface renders a failure after the first byte in its own format. */
export interface StreamTarget {
  /** Writes the runtime's bytes; resolves once more may be written (or the client is gone). */
  write(chunks: readonly Uint8Array[]): Promise<void>;
  /** Writes the last bytes and ends the answer. */
  end(chunks: readonly Uint8Array[]): void;
  /** Writes the last bytes, then an explicit error event, and ends the answer: never a silently truncated stream. */
  fail(chunks: readonly Uint8Array[], code: string, message: string): void;
  /**
   * The client stayed behind past the relay's bound: ends the answer now with an explicit error event, and drops
   * the connection if the client does not take even that. Later writes are ignored.
   */
  abandon(code: string, message: string): void;
}

export type InferenceResult =
  | {
      ok: true;
      kind: 'body';
      workloadId: string;
      /** The runtime's status and content type: a 4xx of the runtime is its answer, relayed as is. */
      status: number;
      contentType: string;
      /** The runtime's bytes as they are. */
      body: Uint8Array;
      timing: InferenceTiming;
    }
  | {
      ok: true;
      kind: 'stream';
      workloadId: string;
      status: number;
      contentType: string;
      /** `accelMs` runs to the first byte. */
      timing: InferenceTiming;
      /** Starts relaying the runtime's bytes into `target`, batch by batch; call once the answer's head is out. */
      pipe(target: StreamTarget): void;
      /** The client left before the end: cancels the runtime call. */
      clientGone(): void;
    }
  | { ok: false; error: InferenceError };
