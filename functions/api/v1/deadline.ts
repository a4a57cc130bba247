/**
 * The deadline of an inference request, in epoch ms: from `X-LunaNexa-Deadline` (epoch ms or an ISO-8601 time),
 * else the body's `timeout` (seconds), else the default. The deadline travels to the node in the `invoke` event
 * and into the workload's record, so it must be a value every one of them holds: a safe integer of the Date
 * range. The rule (docs/security.md, bounds):
 *
 * - the header is 1-16 decimal digits (a safe integer) or an ISO-8601 date-time with its zone; anything else is
 *   `invalid`;
 * - a deadline further ahead than `maxMs` is clamped to now + `maxMs`; one further than `maxMs` + a day is no
 *   deadline a client means (an overflow, a unit mix-up): `invalid`;
 * - a deadline not after now is `past`.
 */
export type DeadlineResult = { ok: true; deadline: number } | { ok: false; reason: 'invalid' | 'past' };

/** How far past the maximum a deadline may name before it is refused rather than clamped. */
const ABSURD_BEYOND_MAX_MS = 24 * 3_600_000;

const EPOCH_MS = /^\d{1,16}$/;
const ISO_8601 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})$/;

export function resolveDeadline(input: {
  header: string | undefined;
  timeoutS: number | undefined;
  now: number;
  defaultMs: number;
  maxMs: number;
}): DeadlineResult {
  const { header, now, maxMs } = input;
  if (header === undefined) {
    const ms = input.timeoutS !== undefined ? Math.ceil(input.timeoutS * 1000) : input.defaultMs;
    return { ok: true, deadline: now + Math.min(ms, maxMs) };
  }
  const text = header.trim();
  const at = EPOCH_MS.test(text) ? Number(text) : ISO_8601.test(text) ? Date.parse(text) : Number.NaN;
  if (!Number.isSafeInteger(at)) return { ok: false, reason: 'invalid' };
  if (at <= now) return { ok: false, reason: 'past' };
  if (at - now > maxMs + ABSURD_BEYOND_MAX_MS) return { ok: false, reason: 'invalid' };
  return { ok: true, deadline: Math.min(at, now + maxMs) };
}
