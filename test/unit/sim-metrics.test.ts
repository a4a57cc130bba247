import { afterEach, describe, expect, it } from 'vitest';
import type { SimServerHandle } from '../../sim/options.js';
import { SIM_MODEL, scrape, startSim, timedStream, sampleValue } from '../helpers/sim-server.js';

/** The simulated runtime's /metrics: vLLM's names in Prometheus' text format, behind the runtime's token. */

const TOKEN = 'metrics-test-token';

const open: SimServerHandle[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((s) => s.close()));
});

describe('sim-server /metrics', () => {
  it("serves vLLM's metric names with the model's label, and counters that grow", async () => {
    const server = await startSim({ token: TOKEN, ttftMs: 5 });
    open.push(server);
    expect((await fetch(`${server.url}/metrics`)).status).toBe(401);

    const before = await scrape(server, TOKEN);
    expect(Object.fromEntries(before.types)).toEqual({
      'vllm:num_requests_running': 'gauge',
      'vllm:num_requests_waiting': 'gauge',
      'vllm:gpu_cache_usage_perc': 'gauge',
      'vllm:prompt_tokens_total': 'counter',
      'vllm:generation_tokens_total': 'counter',
      'vllm:time_to_first_token_seconds': 'histogram',
    });
    for (const sample of before.samples) expect(sample.labels.model_name).toBe(SIM_MODEL);
    expect(sampleValue(before.samples, 'vllm:prompt_tokens_total')).toBe(0);
    expect(sampleValue(before.samples, 'vllm:time_to_first_token_seconds_count')).toBe(0);

    await timedStream(server, 7, TOKEN);
    const answer = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'four words right here' }], max_tokens: 5 }),
    });
    expect(answer.status).toBe(200);
    await answer.arrayBuffer();

    const after = (await scrape(server, TOKEN)).samples;
    // The prompts' words: three, then four; the answers' tokens: seven, then five.
    expect(sampleValue(after, 'vllm:prompt_tokens_total')).toBe(7);
    expect(sampleValue(after, 'vllm:generation_tokens_total')).toBe(12);
    expect(sampleValue(after, 'vllm:time_to_first_token_seconds_count')).toBe(2);
    expect(sampleValue(after, 'vllm:time_to_first_token_seconds_bucket', '+Inf')).toBe(2);
    expect(sampleValue(after, 'vllm:time_to_first_token_seconds_sum')).toBeGreaterThanOrEqual(0.009);
    // The 5 ms of prefill put neither answer in the first bucket (1 ms).
    expect(sampleValue(after, 'vllm:time_to_first_token_seconds_bucket', '0.001')).toBe(0);
    const buckets = after.filter((s) => s.name === 'vllm:time_to_first_token_seconds_bucket').map((s) => s.value);
    expect(buckets).toEqual([...buckets].sort((a, b) => a - b));
    expect(sampleValue(after, 'vllm:num_requests_running')).toBe(0);
    expect(sampleValue(after, 'vllm:gpu_cache_usage_perc')).toBe(0);
  });

  it('reports KV-cache use against vLLM’s default of 256 sequences when maxSequences is not set', async () => {
    const server = await startSim({ tokensPerSecond: 10 });
    open.push(server);
    const streaming = timedStream(server, 5);
    for (;;) {
      const { samples } = await scrape(server);
      if (sampleValue(samples, 'vllm:num_requests_running') === 1) {
        expect(sampleValue(samples, 'vllm:gpu_cache_usage_perc')).toBe(1 / 256);
        break;
      }
      await new Promise((r) => setTimeout(r, 10));
    }
    await streaming;
  });
});
