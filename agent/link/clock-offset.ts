/**
 * The offset of the control plane's clock from this machine's, estimated NTP-style: the server read its clock
 * somewhere between the request leaving and the answer arriving, so the estimate is the midpoint and its
 * error half the round trip. Pure, for the tests; `clock.ts` does the I/O.
 */
export interface OffsetSample {
  /** Control plane's clock minus this machine's, ms: negative when this machine's clock is ahead. */
  offsetMs: number;
  /** Half-width of the interval the true offset lies in. */
  errorMs: number;
}

/** From `GET /agent/v1/time`: `serverNow` was read between `sentAt` and `receivedAt` (this machine's clock). */
export function sampleFromServerTime(sentAt: number, receivedAt: number, serverNow: number): OffsetSample {
  const halfRtt = Math.max(0, receivedAt - sentAt) / 2;
  return { offsetMs: Math.round(serverNow - (sentAt + halfRtt)), errorMs: Math.ceil(halfRtt) };
}

/**
 * From a response's `Date` header, the fallback when the time endpoint does not answer: whole seconds,
 * truncated, so the server's clock read something in [date, date + 1 s) between `sentAt` and `receivedAt`.
 * Null for a missing or unparsable header.
 */
export function sampleFromDateHeader(date: string | null | undefined, sentAt: number, receivedAt: number): OffsetSample | null {
  const at = date ? Date.parse(date) : NaN;
  if (!Number.isFinite(at)) return null;
  const low = at - Math.max(sentAt, receivedAt);
  const high = at + 1_000 - Math.min(sentAt, receivedAt);
  return { offsetMs: Math.round((low + high) / 2), errorMs: Math.ceil((high - low) / 2) };
}

/** Offsets this small are measurement noise on clocks that agree (NTP keeps them within milliseconds). */
export const NOISE_MS = 50;

/**
 * The correction to apply for a sample: none while the clocks agree within the sample's own error plus
 * NOISE_MS, so that agreeing clocks sign and time deadlines with the machine's clock untouched (a 1 ms
 * "correction" from a round trip's asymmetry would only move every deadline by 1 ms).
 */
export function correctionMs(sample: OffsetSample): number {
  return Math.abs(sample.offsetMs) <= sample.errorMs + NOISE_MS ? 0 : sample.offsetMs;
}

/** The sample with the smallest error (the shortest round trip), as NTP picks among its samples. */
export function bestSample(samples: OffsetSample[]): OffsetSample | null {
  return samples.reduce<OffsetSample | null>((best, s) => (best === null || s.errorMs < best.errorMs ? s : best), null);
}

/** False when `sample` shows `offsetMs` is wrong: it lies outside the sample's interval, with `slackMs` to spare. */
export function agrees(offsetMs: number, sample: OffsetSample, slackMs: number): boolean {
  return Math.abs(offsetMs - sample.offsetMs) <= sample.errorMs + slackMs;
}

/** The operator's warning for an offset past `thresholdMs`, or null. */
export function skewWarning(offsetMs: number, thresholdMs: number): string | null {
  if (Math.abs(offsetMs) <= thresholdMs) return null;
  const side = offsetMs < 0 ? 'ahead of' : 'behind';
  return `this machine's clock is ${(Math.abs(offsetMs) / 1000).toFixed(1)} s ${side} the control plane's: the agent signs with the control plane's time and keeps working, but fix this machine's time (NTP)`;
}
