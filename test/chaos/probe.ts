import type { Api } from './api.js';
import { sleep } from './measure.js';

/** One inference request of a probe: when it was sent (`performance.now()`), how long it took, how it ended. */
export interface Sample {
  at: number;
  ms: number;
  status: number;
  error: string | null;
}

/**
 * Inference requests one after another, each stamped with when it was sent: the client load (test/helpers/load.ts)
 * counts outcomes, this tells *when* inference failed and when it came back. Each request is bounded by
 * `timeoutMs`; the probe stops by itself after `maxMs`.
 */
export function startProbe(api: Api, model: string, opts: { workers?: number; pauseMs?: number; timeoutMs?: number; maxMs?: number } = {}) {
  const samples: Sample[] = [];
  let running = true;
  const until = performance.now() + (opts.maxMs ?? 600_000);
  const worker = async () => {
    while (running && performance.now() < until) {
      const at = performance.now();
      try {
        const response = await api.chat(model, {}, {}, opts.timeoutMs ?? 30_000);
        const body = await response.text();
        samples.push({ at, ms: performance.now() - at, status: response.status, error: response.status === 200 ? null : body.slice(0, 200) });
      } catch (error) {
        samples.push({ at, ms: performance.now() - at, status: 0, error: error instanceof Error ? error.message : String(error) });
      }
      await sleep(opts.pauseMs ?? 200);
    }
  };
  const workers = Array.from({ length: opts.workers ?? 1 }, worker);
  return {
    samples,
    async stop(): Promise<Sample[]> {
      running = false;
      await Promise.all(workers);
      return samples;
    },
  };
}

/** When (`performance.now()`) the first request to succeed after `fromMs` ended; samples are kept in the order they end. */
export function firstOkAfter(samples: readonly Sample[], fromMs: number): number | null {
  const first = samples.find((s) => s.status === 200 && s.at + s.ms >= fromMs);
  return first ? first.at + first.ms : null;
}

/** When (`performance.now()`) the last request to fail after `fromMs` ended, or null when none did. */
export function lastFailureAfter(samples: readonly Sample[], fromMs: number): number | null {
  const last = samples.filter((s) => s.status !== 200 && s.at + s.ms >= fromMs).at(-1);
  return last ? last.at + last.ms : null;
}
