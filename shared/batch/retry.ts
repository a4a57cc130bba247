import type { RowRetry } from './job.js';

/**
 * Statuses a row is sent again after: a timeout (408), too many requests (429) and the server errors that say
 * "not now" (500, 502, 503, 504). Not 409: on `/v1` it means the row's Idempotency-Key was used already, and it
 * answers the same however often it is asked. Nor the other client errors (400, 401, 403, 404, 413, 422): the
 * same request fails the same way.
 */
export const RETRYABLE_STATUSES: ReadonlySet<number> = new Set([408, 429, 500, 502, 503, 504]);

/** How a row's attempt failed: with an HTTP status (and its `Retry-After` in seconds, if any), or with no answer at all. */
export type RowFailure = { status: number; retryAfterS?: number | null } | { networkError: true };

export type RetryDecision = { retry: true; delayMs: number } | { retry: false };

/**
 * Whether row `rowIndex` is sent again after its attempt `attempt` (1 for the first) failed, and after how long.
 * A connection that failed or broke is retried like a retryable status. At most `policy.maxAttempts` attempts in
 * all. The wait doubles from `baseMs` up to `maxMs`, then a jitter spreads it over its upper half; a `Retry-After`
 * replaces it (plus a jitter of up to `baseMs`, so that the rows it stopped do not all return at once), never over
 * `maxMs`. The jitter is derived from the row and the attempt: the same failure always waits the same time.
 */
export function retryDelay(input: RowFailure & { attempt: number; rowIndex: number; policy: RowRetry }): RetryDecision {
  const { attempt, rowIndex, policy } = input;
  if ('status' in input && !RETRYABLE_STATUSES.has(input.status)) return { retry: false };
  if (attempt >= policy.maxAttempts) return { retry: false };
  const fraction = jitter(rowIndex, attempt);
  const retryAfterS = 'status' in input ? input.retryAfterS : null;
  if (typeof retryAfterS === 'number' && Number.isFinite(retryAfterS) && retryAfterS >= 0) {
    return { retry: true, delayMs: Math.min(policy.maxMs, Math.round(retryAfterS * 1000 + fraction * policy.baseMs)) };
  }
  const ceiling = Math.min(policy.maxMs, policy.baseMs * 2 ** Math.min(attempt - 1, 52));
  return { retry: true, delayMs: Math.round(ceiling / 2 + (fraction * ceiling) / 2) };
}

/** A fraction in [0, 1) from a row and an attempt (murmur3's finaliser over both): spread, and the same every time. */
function jitter(rowIndex: number, attempt: number): number {
  const low = rowIndex >>> 0;
  const high = Math.floor(rowIndex / 2 ** 32) >>> 0;
  return mix(mix(mix(attempt) ^ low) ^ high) / 2 ** 32;
}

function mix(value: number): number {
  let h = value;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}
