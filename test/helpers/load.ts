/** What a steady request load saw: every request's outcome, so a test can say exactly what failed. */
export interface LoadReport {
  sent: number;
  ok: number;
  failures: Array<{ status: number; body: string }>;
  /** Milliseconds each successful request took, in completion order. */
  latenciesMs: number[];
}

/**
 * A steady inference load for tests: `workers` loops, each sending one small chat request after another with
 * `pauseMs` between them, until `stop()`. Bounded: it stops by itself after `maxMs`.
 */
export function startLoad(opts: { url: string; token: string; model: string; workers?: number; pauseMs?: number; maxMs?: number }): {
  stop(): Promise<LoadReport>;
} {
  const report: LoadReport = { sent: 0, ok: 0, failures: [], latenciesMs: [] };
  let running = true;
  const until = Date.now() + (opts.maxMs ?? 180_000);
  const worker = async () => {
    while (running && Date.now() < until) {
      report.sent += 1;
      const started = performance.now();
      try {
        const response = await fetch(`${opts.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${opts.token}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model: opts.model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
        });
        const body = await response.text();
        if (response.status === 200) {
          report.ok += 1;
          report.latenciesMs.push(performance.now() - started);
        } else report.failures.push({ status: response.status, body: body.slice(0, 300) });
      } catch (error) {
        report.failures.push({ status: 0, body: String(error) });
      }
      await new Promise((r) => setTimeout(r, opts.pauseMs ?? 50));
    }
  };
  const workers = Array.from({ length: opts.workers ?? 2 }, worker);
  return {
    async stop() {
      running = false;
      await Promise.all(workers);
      return report;
    },
  };
}
