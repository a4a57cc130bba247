import type { ContentfulStatusCode } from 'hono/utils/http-status';
import type { z } from 'zod';

/** Every error code the management and agent surfaces answer with, and its HTTP status. */
const ERROR_STATUS = {
  invalid_json: 400,
  validation_failed: 400,
  bad_request: 400,
  /** A deployment names a runtime template, or a runtime secret, that is not registered. */
  unknown_template: 400,
  unknown_secret: 400,
  /** An agent upload that is not frames of the protocol (docs/design.md section 5), or carries one over the limit. */
  invalid_frames: 400,
  /** A list's `?cursor=` that this service did not mint (malformed, truncated, another list's). */
  invalid_cursor: 400,
  unauthorized: 401,
  invalid_token: 401,
  invalid_machine_token: 401,
  machine_revoked: 401,
  credential_expired: 401,
  /** A machine token's times are off by more than the tolerated skew: the machine's clock is wrong. */
  clock_skew: 401,
  replayed_request: 401,
  body_digest_mismatch: 401,
  invalid_enrollment_token: 401,
  enrollment_token_expired: 401,
  enrollment_token_revoked: 401,
  forbidden: 403,
  forbidden_machine: 403,
  enrollment_name_mismatch: 403,
  not_found: 404,
  method_not_allowed: 405,
  conflict: 409,
  /** A model version's lifecycle refuses the move (functions/core/registry/lifecycle.ts): the message says why. */
  invalid_transition: 409,
  /** Digest verification where the control plane has no artifact store (Workers). */
  no_artifact_store: 409,
  enrollment_token_used: 409,
  machine_name_taken: 409,
  replayed_sequence: 409,
  /** An uplink or frames upload for a machine whose stream no live instance holds: reconnect the stream first. */
  no_stream: 409,
  /** A workload whose holding instance died: it cannot be reached, and is recorded as failed. */
  workload_unreachable: 409,
  payload_too_large: 413,
  uri_too_long: 414,
  unsupported_media_type: 415,
  /** A token past its management requests per minute; `details.retryAfterS` is the `Retry-After` header's. */
  rate_limit_exceeded: 429,
  internal: 500,
  unavailable: 503,
  /** The store is away (an outage): the request may be retried. */
  store_unavailable: 503,
} as const satisfies Record<string, ContentfulStatusCode>;
export type ErrorCode = keyof typeof ERROR_STATUS;

/** The one error type of the service layer and handlers; mapped to the surface's envelope by `onError`. */
export class ApiError extends Error {
  readonly code: ErrorCode;
  readonly details: unknown;
  constructor(code: ErrorCode, message: string, details?: unknown) {
    super(message);
    this.code = code;
    this.details = details;
  }
  get status(): ContentfulStatusCode {
    return ERROR_STATUS[this.code];
  }
}

/** zod issues in the shape clients receive under `details`. */
export function zodDetails(error: z.ZodError): Array<{ path: string; message: string }> {
  return error.issues.map((issue) => ({ path: issue.path.join('.'), message: issue.message }));
}

/** Validates `value` with `schema`, turning failure into a 400 `validation_failed`. */
export function parseOr400<S extends z.ZodType>(schema: S, value: unknown): z.output<S> {
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    const first = parsed.error.issues[0];
    const where = first?.path.length ? ` at ${first.path.join('.')}` : '';
    throw new ApiError('validation_failed', `${first?.message ?? 'invalid input'}${where}`, zodDetails(parsed.error));
  }
  return parsed.data;
}

/** Parses a request body as JSON, turning malformed JSON into a 400 `invalid_json`. */
export function parseJsonOr400(text: string): unknown {
  if (text.length === 0) throw new ApiError('invalid_json', 'request body is empty; JSON expected');
  try {
    return JSON.parse(text);
  } catch {
    throw new ApiError('invalid_json', 'request body is not valid JSON');
  }
}
