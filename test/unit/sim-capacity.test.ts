import { afterEach, describe, expect, it } from 'vitest';
import { simulatedLaunch } from '../../agent/runtimes/simulated.js';
import { SimulatedRuntime } from '../../shared/contracts/desired.js';
import { parseSimArgs } from '../../sim/args.js';
import type { SimServerHandle, SimServerOptions } from '../../sim/options.js';
import { startSim, timedStream, sampleValue, waitForMetrics } from '../helpers/sim-server.js';

/**
 * The simulated runtime's capacity (docs/design.md section 9): `maxSequences` queues what does not fit, and
 * `sharedTokensPerSecond` slows every sequence as more run. Bounds are generous lower bounds the pacing guarantees,
 * never upper bounds a loaded machine could miss.
 */

const open: SimServerHandle[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((s) => s.close()));
});

async function start(overrides: Partial<SimServerOptions>): Promise<SimServerHandle> {
  const server = await startSim(overrides);
  open.push(server);
  return server;
}

describe('sim-server capacity', () => {
  it('runs maxSequences at once and queues the rest, their wait counting in their time to first token', async () => {
    // Each request holds its slot for at least 19 tokens at 20 tokens/s: 950 ms.
    const server = await start({ maxSequences: 2, tokensPerSecond: 20 });
    const requests = Array.from({ length: 4 }, () => timedStream(server, 20));
    const busy = await waitForMetrics(server, (s) => sampleValue(s, 'vllm:num_requests_running') + sampleValue(s, 'vllm:num_requests_waiting') === 4);
    expect(sampleValue(busy, 'vllm:num_requests_running')).toBe(2);
    expect(sampleValue(busy, 'vllm:num_requests_waiting')).toBe(2);
    expect(sampleValue(busy, 'vllm:gpu_cache_usage_perc')).toBe(1);

    const ttfts = (await Promise.all(requests)).map((r) => r.ttftMs).sort((a, b) => a - b);
    // The two that waited got their first token only once a running one had finished.
    expect(ttfts[2]).toBeGreaterThanOrEqual(900);
    expect(ttfts[2]).toBeGreaterThan(ttfts[1]!);
    const idle = await waitForMetrics(server, (s) => sampleValue(s, 'vllm:num_requests_running') === 0);
    expect(sampleValue(idle, 'vllm:num_requests_waiting')).toBe(0);
    expect(sampleValue(idle, 'vllm:time_to_first_token_seconds_count')).toBe(4);
  });

  it('lets a queued request that gives up leave the queue without taking a slot', async () => {
    const server = await start({ maxSequences: 1, tokensPerSecond: 10 });
    const running = timedStream(server, 10);
    await waitForMetrics(server, (s) => sampleValue(s, 'vllm:num_requests_running') === 1);
    const abort = new AbortController();
    const queued = fetch(`${server.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'x', max_tokens: 10, stream: true }),
      signal: abort.signal,
    });
    await waitForMetrics(server, (s) => sampleValue(s, 'vllm:num_requests_waiting') === 1);
    abort.abort();
    await queued.then((res) => res.body?.cancel()).catch(() => {});
    await waitForMetrics(server, (s) => sampleValue(s, 'vllm:num_requests_waiting') === 0);
    await running;
    await waitForMetrics(server, (s) => sampleValue(s, 'vllm:num_requests_running') === 0);
    expect(server.stats()).toMatchObject({ completed: 1, aborted: 1, active: 0 });
  });

  it('ends a queued request at its deadline', async () => {
    const server = await start({ maxSequences: 1, tokensPerSecond: 5 });
    const running = timedStream(server, 10);
    await waitForMetrics(server, (s) => sampleValue(s, 'vllm:num_requests_running') === 1);
    const late = await fetch(`${server.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-lunanexa-deadline': String(Date.now() + 200) },
      body: JSON.stringify({ prompt: 'x', max_tokens: 10 }),
    });
    expect(late.status).toBe(504);
    expect(((await late.json()) as { error: { code: string } }).error.code).toBe('deadline_exceeded');
    expect(server.stats()).toMatchObject({ aborted: 1, active: 1 });
    await running;
  });

  it('shares sharedTokensPerSecond among the running sequences, each capped at tokensPerSecond', async () => {
    const server = await start({ sharedTokensPerSecond: 100, tokensPerSecond: 100 });
    // Alone, 30 tokens at 100 tokens/s: at least 290 ms.
    const alone = await timedStream(server, 30);
    expect(alone.totalMs).toBeGreaterThanOrEqual(280);
    // Four at once share 100 tokens/s: their 116 tokens after the first take at least 1.16 s in all.
    const together = await Promise.all(Array.from({ length: 4 }, () => timedStream(server, 30)));
    const slowest = Math.max(...together.map((r) => r.totalMs));
    expect(slowest).toBeGreaterThanOrEqual(1100);
    expect(slowest).toBeGreaterThan(alone.totalMs);
  });

  it('paces non-streamed answers at the shared rate as well', async () => {
    const server = await start({ sharedTokensPerSecond: 50 });
    const startedAt = performance.now();
    const answers = await Promise.all(
      Array.from({ length: 2 }, () =>
        fetch(`${server.url}/v1/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ prompt: 'x', max_tokens: 11 }),
        }),
      ),
    );
    for (const answer of answers) expect(answer.status).toBe(200);
    // Two sequences at 25 tokens/s each: 10 tokens after the first take 400 ms.
    expect(performance.now() - startedAt).toBeGreaterThanOrEqual(380);
    await Promise.all(answers.map((a) => a.arrayBuffer()));
  });
});

describe('capacity options', () => {
  it('are flags of the sim-server, bounded', () => {
    expect(parseSimArgs(['--model', 'm', '--max-sequences', '8', '--shared-tokens-per-second=400'])).toMatchObject({
      maxSequences: 8,
      sharedTokensPerSecond: 400,
    });
    expect(parseSimArgs(['--model', 'm'])).not.toHaveProperty('maxSequences');
    for (const bad of [
      ['--max-sequences', '0'],
      ['--max-sequences', '1.5'],
      ['--max-sequences', '4097'],
      ['--shared-tokens-per-second', '0'],
      ['--shared-tokens-per-second', '2000000'],
    ]) {
      expect(() => parseSimArgs(['--model', 'm', ...bad])).toThrow(bad[0]);
    }
  });

  it('travel from the runtime spec to the simulator flags only when given', () => {
    const base = SimulatedRuntime.parse({ kind: 'simulated', model: 'm' });
    expect(base).not.toHaveProperty('maxSequences');
    expect(simulatedLaunch(base, null).args.join(' ')).not.toMatch(/max-sequences|shared-tokens/);
    const loaded = SimulatedRuntime.parse({ kind: 'simulated', model: 'm', maxSequences: 4, sharedTokensPerSecond: 500 });
    const args = simulatedLaunch(loaded, null).args;
    expect(parseSimArgs(args.slice(args.indexOf('sim-runtime') + 1).map((a) => a.replace('{port}', '0').replace('{instance}', 'i')))).toMatchObject({
      maxSequences: 4,
      sharedTokensPerSecond: 500,
    });
    expect(SimulatedRuntime.safeParse({ kind: 'simulated', model: 'm', maxSequences: 0 }).success).toBe(false);
    expect(SimulatedRuntime.safeParse({ kind: 'simulated', model: 'm', sharedTokensPerSecond: 0 }).success).toBe(false);
  });
});
