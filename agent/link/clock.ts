import { fetch, type Dispatcher } from 'undici';
import { ServerTime } from '../../shared/contracts/time.js';
import { agrees, bestSample, correctionMs, sampleFromDateHeader, sampleFromServerTime, skewWarning, type OffsetSample } from './clock-offset.js';

const PATH = '/agent/v1/time';

/** Past this offset the operator is told to fix the machine's time. */
const CLOCK_WARN_ABOVE_MS = 2_000;

/** A clock drifts, and NTP may step it: the offset is measured again this often. */
export const CLOCK_REMEASURE_MS = 10 * 60_000;

/** Samples per measurement: the one with the shortest round trip is kept. */
const SAMPLES = 3;
const SAMPLE_TIMEOUT_MS = 5_000;

/**
 * A Date header is whole seconds from the instance's cached date string: it contradicts a precise estimate only
 * past this, and measures again at most every DATE_RESYNC_SPACING_MS (an instance's clock may differ from the
 * database's, and would have every response contradict the estimate).
 */
const DATE_SLACK_MS = 1_000;
const DATE_RESYNC_SPACING_MS = 30_000;

/** A refusal for skew measures again at once, but a burst of refusals measures once. */
const RESYNC_SPACING_MS = 2_000;

type Log = (event: string, fields?: Record<string, unknown>) => void;

/** The control plane's clock as this agent knows it: what it signs with and judges the plane's times by. */
export interface ServerClock {
  /** The control plane's time now (epoch ms): this machine's clock corrected by the measured offset. */
  now(): number;
  /** A time of the control plane's (a deadline) in this machine's clock, for local timers and processes. */
  toLocal(serverTimeMs: number): number;
  /** Measures the offset from `GET /agent/v1/time` (a response's Date header when that does not answer). Never throws. */
  measure(reason: string): Promise<void>;
  /** Measures unless a measurement just started: after a refusal for skew. */
  resync(reason: string): Promise<void>;
  /** True once CLOCK_REMEASURE_MS passed since the last measurement. */
  due(): boolean;
  /** Checks the estimate against the `Date` header of a response sent at `sentAt` and received at `receivedAt`. */
  observeDate(date: string | null, sentAt: number, receivedAt: number): void;
}

export function createServerClock(opts: { baseUrl: string; dispatcher: Dispatcher; log: Log }): ServerClock {
  let offsetMs = 0;
  /** Whether the offset came from the time endpoint (else from a Date header, or nothing yet). */
  let precise = false;
  /** performance.now() of the last measurement started (monotonic: this machine's clock may step). */
  let lastAttemptAt = -Infinity;
  let measuring: Promise<void> | undefined;
  let dateResyncAt = -Infinity;

  const adopt = (sample: OffsetSample, fromEndpoint: boolean, reason: string) => {
    offsetMs = correctionMs(sample);
    precise = fromEndpoint;
    const warning = skewWarning(offsetMs, CLOCK_WARN_ABOVE_MS);
    if (warning) opts.log('clock skew', { offsetMs, errorMs: sample.errorMs, source: fromEndpoint ? 'time endpoint' : 'Date header', reason, warning });
  };

  async function sample(): Promise<{ sample: OffsetSample; fromEndpoint: boolean } | null> {
    const sentAt = Date.now();
    const response = await fetch(new URL(PATH, opts.baseUrl), {
      redirect: 'manual',
      dispatcher: opts.dispatcher,
      signal: AbortSignal.timeout(SAMPLE_TIMEOUT_MS),
    });
    const receivedAt = Date.now();
    const text = await response.text();
    if (response.status === 200) {
      let json: unknown = null;
      try {
        json = JSON.parse(text);
      } catch {
        // Not the time endpoint (a proxy's page, say): the Date header below still tells something.
      }
      const parsed = ServerTime.safeParse(json);
      if (parsed.success) return { sample: sampleFromServerTime(sentAt, receivedAt, parsed.data.now), fromEndpoint: true };
    }
    const fallback = sampleFromDateHeader(response.headers.get('date'), sentAt, receivedAt);
    return fallback && { sample: fallback, fromEndpoint: false };
  }

  function measure(reason: string): Promise<void> {
    lastAttemptAt = performance.now();
    measuring ??= (async () => {
      const exact: OffsetSample[] = [];
      const coarse: OffsetSample[] = [];
      let error: string | undefined;
      for (let i = 0; i < SAMPLES; i++) {
        try {
          const got = await sample();
          if (got) (got.fromEndpoint ? exact : coarse).push(got.sample);
        } catch (e) {
          // Unreachable: further samples would wait out the same timeout.
          error = e instanceof Error ? e.message : String(e);
          break;
        }
      }
      const best = bestSample(exact) ?? bestSample(coarse);
      if (best) adopt(best, exact.length > 0, reason);
      else opts.log('clock offset not measured', { reason, error: error ?? 'the control plane answered neither its time nor a Date header' });
    })().finally(() => (measuring = undefined));
    return measuring;
  }

  const resync = (reason: string): Promise<void> => measuring ?? (performance.now() - lastAttemptAt < RESYNC_SPACING_MS ? Promise.resolve() : measure(reason));

  return {
    now: () => Date.now() + offsetMs,
    toLocal: (serverTimeMs) => serverTimeMs - offsetMs,
    measure,
    resync,
    due: () => performance.now() - lastAttemptAt >= CLOCK_REMEASURE_MS,
    observeDate(date, sentAt, receivedAt) {
      const observed = sampleFromDateHeader(date, sentAt, receivedAt);
      if (!observed || agrees(offsetMs, observed, DATE_SLACK_MS)) return;
      if (!precise) return adopt(observed, false, "a response's Date header");
      // A precise estimate that a Date header contradicts means this machine's clock stepped: measure again.
      if (performance.now() - dateResyncAt < DATE_RESYNC_SPACING_MS) return;
      dateResyncAt = performance.now();
      void measure("a response's Date header disagrees with the measured offset");
    },
  };
}
