import type { BenchmarkEvidence, WorkloadProfile } from '../../../shared/contracts/benchmark.js';
import { quantile } from '../../../shared/stats.js';

/** What one request of a gate run showed, times in ms from when it was sent. */
export interface GateObservation {
  ok: boolean;
  /** When each streamed event carrying generated text arrived. */
  tokenAtMs: number[];
  /** From the runtime's `usage`; null when it sent none (then the events are counted). */
  completionTokens: number | null;
  endMs: number;
}

/**
 * Reads an OpenAI-style SSE stream as it arrives, chunk by chunk (events may be split across chunks or several may
 * share one), and notes when text arrives and the usage the runtime reports.
 */
export class TokenStreamReader {
  private buffer = '';
  private readonly decoder = new TextDecoder();
  readonly tokenAtMs: number[] = [];
  completionTokens: number | null = null;

  push(chunk: Uint8Array, atMs: number): void {
    this.buffer += this.decoder.decode(chunk, { stream: true });
    let end: number;
    while ((end = this.buffer.indexOf('\n\n')) >= 0) {
      const event = this.buffer.slice(0, end);
      this.buffer = this.buffer.slice(end + 2);
      for (const line of event.split('\n')) {
        if (!line.startsWith('data:')) continue;
        const data = line.slice(5).trim();
        if (data === '[DONE]') continue;
        let json: { choices?: Array<{ delta?: { content?: unknown }; text?: unknown }>; usage?: { completion_tokens?: unknown } | null };
        try {
          json = JSON.parse(data);
        } catch {
          // Silent by design: a data line that is not JSON carries no token to time; the gate measures the rest.
          continue;
        }
        const choice = json.choices?.[0];
        const text = choice?.delta?.content ?? choice?.text;
        if (typeof text === 'string' && text.length > 0) this.tokenAtMs.push(atMs);
        if (typeof json.usage?.completion_tokens === 'number') this.completionTokens = json.usage.completion_tokens;
      }
    }
  }
}

const round = (ms: number) => Math.round(ms * 100) / 100;
const percentiles = (values: readonly number[]) => ({
  p50: round(quantile(values, 0.5) ?? 0),
  p95: round(quantile(values, 0.95) ?? 0),
  p99: round(quantile(values, 0.99) ?? 0),
});

/**
 * The measurements of a gate run and the thresholds they miss (docs/registry.md, "Benchmark gate"). TTFT is to the
 * first event carrying text; inter-token latency is every gap between text events (events a batch delivered
 * together count as 0 ms apart: what a client sees); tokens/s is per request over its generation phase and in total
 * over the run. A request that failed, or finished without a token, is an error. Pure.
 */
export function judgeGate(
  observations: readonly GateObservation[],
  profile: WorkloadProfile,
  durationMs: number,
): Pick<BenchmarkEvidence, 'requests' | 'errors' | 'ttftMs' | 'interTokenMs' | 'latencyMs' | 'tokensPerSecond' | 'durationMs' | 'failures'> {
  const served = observations.filter((o) => o.ok && o.tokenAtMs.length > 0);
  const tokensOf = (o: GateObservation) => o.completionTokens ?? o.tokenAtMs.length;
  const gaps = served.flatMap((o) => o.tokenAtMs.slice(1).map((at, i) => at - o.tokenAtMs[i]!));
  const rates = served.flatMap((o) => {
    const generation = o.endMs - o.tokenAtMs[0]!;
    return generation > 0 ? [(tokensOf(o) * 1000) / generation] : [];
  });
  const errors = observations.length - served.length;
  const ttft = percentiles(served.map((o) => o.tokenAtMs[0]!));
  const tokensPerSecond = {
    perRequestP50: round(quantile(rates, 0.5) ?? 0),
    aggregate: round(durationMs > 0 ? (served.reduce((sum, o) => sum + tokensOf(o), 0) * 1000) / durationMs : 0),
  };
  const failures: string[] = [];
  const errorRate = observations.length > 0 ? errors / observations.length : 1;
  const { thresholds } = profile;
  if (served.length === 0) failures.push('no request was served');
  if (errorRate > thresholds.errorRateMax)
    failures.push(`error rate ${(errorRate * 100).toFixed(1)} % is above the ${(thresholds.errorRateMax * 100).toFixed(1)} % allowed`);
  if (thresholds.ttftP95Ms !== undefined && served.length > 0 && ttft.p95 > thresholds.ttftP95Ms)
    failures.push(`TTFT p95 ${ttft.p95} ms is above ${thresholds.ttftP95Ms} ms`);
  if (thresholds.tokensPerSecondMin !== undefined && served.length > 0 && tokensPerSecond.perRequestP50 < thresholds.tokensPerSecondMin) {
    failures.push(`${tokensPerSecond.perRequestP50} tokens/s per request (median) is below ${thresholds.tokensPerSecondMin}`);
  }
  return {
    requests: observations.length,
    errors,
    ttftMs: ttft,
    interTokenMs: percentiles(gaps),
    latencyMs: percentiles(observations.map((o) => o.endMs)),
    tokensPerSecond,
    durationMs: round(durationMs),
    failures,
  };
}
