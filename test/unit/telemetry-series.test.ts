import { describe, expect, it } from 'vitest';
import { parseEngineMetrics } from '../../agent/telemetry/engine-metrics.js';
import { gpuSample } from '../../agent/telemetry/sampler.js';
import { bucketize } from '../../functions/core/telemetry/series.js';

describe("an engine's metrics as the agent reads them", () => {
  it("reads vLLM's names, summing a name's series, and ignores the rest", () => {
    const text = [
      '# HELP vllm:num_requests_running Number of requests in model execution batches.',
      '# TYPE vllm:num_requests_running gauge',
      'vllm:num_requests_running{model_name="a"} 3.0',
      'vllm:num_requests_running{model_name="b"} 1.0',
      'vllm:num_requests_waiting{model_name="a"} 7',
      'vllm:gpu_cache_usage_perc{model_name="a"} 0.25',
      'vllm:prompt_tokens_total{model_name="a"} 1200',
      'vllm:generation_tokens_total{model_name="a"} 3400 1733486400000',
      'vllm:time_to_first_token_seconds_bucket{le="0.1"} 5',
      'process_cpu_seconds_total 12.5',
    ].join('\n');
    expect(parseEngineMetrics(text)).toEqual({
      requestsRunning: 4,
      requestsWaiting: 7,
      kvCacheUsage: 0.25,
      promptTokensTotal: 1200,
      generationTokensTotal: 3400,
    });
  });

  it("reads llama.cpp's names, with null for what it does not export", () => {
    expect(parseEngineMetrics('llamacpp:requests_processing 2\nllamacpp:requests_deferred 1\nllamacpp:tokens_predicted_total 99\n')).toEqual({
      requestsRunning: 2,
      requestsWaiting: 1,
      kvCacheUsage: null,
      promptTokensTotal: null,
      generationTokensTotal: 99,
    });
  });

  it('is null for text with none of the names, and drops a value out of bounds rather than the sample', () => {
    expect(parseEngineMetrics('# nothing here\nhttp_requests_total 5\n')).toBeNull();
    expect(parseEngineMetrics('')).toBeNull();
    expect(parseEngineMetrics('vllm:gpu_cache_usage_perc{a="1"} 0.8\nvllm:gpu_cache_usage_perc{a="2"} 0.7\nvllm:num_requests_running 2\n')).toMatchObject({
      kvCacheUsage: null,
      requestsRunning: 2,
    });
    expect(parseEngineMetrics('vllm:num_requests_running NaN\nvllm:num_requests_waiting -3\nvllm:prompt_tokens_total 4\n')).toMatchObject({
      requestsRunning: null,
      requestsWaiting: null,
      promptTokensTotal: 4,
    });
  });
});

describe('a GPU sample', () => {
  it("keeps the inventory row's telemetry columns only", () => {
    const row = {
      index: 1,
      uuid: 'GPU-1',
      name: 'NVIDIA H100',
      memoryTotalMiB: 81_559,
      memoryUsedMiB: 1_024,
      unifiedMemory: false,
      driverVersion: '550.1',
      utilizationPercent: 87,
      temperatureC: 66,
      powerDrawW: 412.5,
    };
    expect(gpuSample(row)).toEqual({ index: 1, utilizationPercent: 87, memoryUsedMiB: 1_024, memoryTotalMiB: 81_559, temperatureC: 66, powerDrawW: 412.5 });
  });
});

describe('samples in buckets', () => {
  const window = { from: 0, to: 60_000, points: 6 };

  it('averages the samples of each bucket and leaves a bucket without one null', () => {
    const { stepMs, buckets } = bucketize(
      [
        { at: 1_000, values: { u: 10 } },
        { at: 9_000, values: { u: 30 } },
        { at: 25_000, values: { u: 50, t: 60 } },
        { at: 59_999, values: { u: 100 } },
      ],
      ['u', 't'] as const,
      window,
    );
    expect(stepMs).toBe(10_000);
    expect(buckets.map((b) => b.at)).toEqual([0, 10_000, 20_000, 30_000, 40_000, 50_000]);
    expect(buckets.map((b) => b.values.u)).toEqual([20, null, 50, null, null, 100]);
    expect(buckets.map((b) => b.values.t)).toEqual([null, null, 60, null, null, null]);
  });

  it('leaves out samples outside the window and values that are no number', () => {
    const { buckets } = bucketize(
      [
        { at: -1, values: { u: 1 } },
        { at: 60_000, values: { u: 1 } },
        { at: 5_000, values: { u: null } },
        { at: 6_000, values: { u: Number.NaN } },
      ],
      ['u'] as const,
      window,
    );
    expect(buckets.every((b) => b.values.u === null)).toBe(true);
  });

  it('never answers more buckets than points, whatever the window', () => {
    for (const points of [2, 7, 120]) {
      const { buckets } = bucketize([], ['u'] as const, { from: 0, to: 3_600_000 + 13, points });
      expect(buckets.length).toBeLessThanOrEqual(points);
      expect(buckets.length).toBeGreaterThan(0);
    }
  });
});
