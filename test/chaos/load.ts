import { startLoad, type LoadReport } from '../helpers/load.js';
import type { Api } from './api.js';
import { percentile, roundMs } from './measure.js';
import type { RequestTally } from './scenario.js';

/** A load's outcome in the table's form. */
export function tally(report: LoadReport): RequestTally {
  const p = (q: number) => roundMs(percentile(report.latenciesMs, q));
  return {
    sent: report.sent,
    failed: report.failures.length,
    p50Ms: p(50),
    p99Ms: p(99),
    maxMs: roundMs(report.latenciesMs.length ? Math.max(...report.latenciesMs) : null),
  };
}

/**
 * Client loops sending small chat completions (test/helpers/load.ts) for the length of a fault. Their requests
 * carry no deadline of their own, so stopping is bounded here: a load that does not stop within 60 s fails the
 * scenario instead of holding it.
 */
export function clientLoad(api: Api, model: string, opts: { workers?: number; pauseMs?: number; maxMs?: number } = {}) {
  const load = startLoad({ url: api.url, token: api.token, model, workers: opts.workers ?? 4, pauseMs: opts.pauseMs ?? 50, maxMs: opts.maxMs });
  return {
    async stop(): Promise<LoadReport> {
      let timer: NodeJS.Timeout | undefined;
      try {
        return await Promise.race([
          load.stop(),
          new Promise<never>(
            (_, reject) => (timer = setTimeout(() => reject(new Error('the client load did not stop within 60 s (a request hangs)')), 60_000)),
          ),
        ]);
      } finally {
        clearTimeout(timer);
      }
    },
  };
}
