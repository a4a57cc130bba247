/**
 * The simulator's Prometheus metrics under vLLM's names, so that whatever scrapes a real engine (autoscaling, the
 * simulated nvidia-smi) reads the simulator unchanged. llama.cpp's server names the same quantities
 * `llamacpp:requests_processing` (running), `llamacpp:requests_deferred` (waiting), `llamacpp:kv_cache_usage_ratio`,
 * `llamacpp:prompt_tokens_total` and `llamacpp:tokens_predicted_total`; the simulator speaks vLLM's only.
 */

// vLLM's own buckets for time_to_first_token_seconds, so that quantiles compare with a real engine's.
const TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560];

/** The text exposition format's content type (version 0.0.4), as vLLM serves it. */
export const METRICS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

/** The scheduler's state at the moment of a scrape. */
export interface Load {
  running: number;
  waiting: number;
  /** 0..1 */
  cacheUsage: number;
}

const labelValue = (text: string): string => text.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');

export function createMetrics(model: string) {
  const label = `model_name="${labelValue(model)}"`;
  let promptTokens = 0;
  let generationTokens = 0;
  // Per bucket, not cumulative: observing touches one count, and a scrape adds them up.
  const ttftCounts = new Array<number>(TTFT_BUCKETS.length + 1).fill(0);
  let ttftSum = 0;
  let ttftCount = 0;

  return {
    /** A sequence's first token: its prompt is done, and its time to first token (queueing included) is known. */
    firstToken(ttftMs: number, prompt: number): void {
      const seconds = ttftMs / 1000;
      let i = 0;
      while (i < TTFT_BUCKETS.length && seconds > (TTFT_BUCKETS[i] as number)) i++;
      ttftCounts[i] = (ttftCounts[i] as number) + 1;
      ttftSum += seconds;
      ttftCount++;
      promptTokens += prompt;
    },
    generated(tokens: number): void {
      generationTokens += tokens;
    },
    render(load: Load): string {
      const lines: string[] = [];
      const family = (name: string, type: string, help: string, samples: string[]): void => {
        lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`, ...samples);
      };
      family('vllm:num_requests_running', 'gauge', 'Number of requests in model execution batches.', [`vllm:num_requests_running{${label}} ${load.running}`]);
      family('vllm:num_requests_waiting', 'gauge', 'Number of requests waiting to be processed.', [`vllm:num_requests_waiting{${label}} ${load.waiting}`]);
      family('vllm:gpu_cache_usage_perc', 'gauge', 'GPU KV-cache usage. 1 means 100 percent usage.', [
        `vllm:gpu_cache_usage_perc{${label}} ${load.cacheUsage}`,
      ]);
      family('vllm:prompt_tokens_total', 'counter', 'Number of prefill tokens processed.', [`vllm:prompt_tokens_total{${label}} ${promptTokens}`]);
      family('vllm:generation_tokens_total', 'counter', 'Number of generation tokens processed.', [
        `vllm:generation_tokens_total{${label}} ${generationTokens}`,
      ]);
      const buckets: string[] = [];
      let cumulative = 0;
      for (const [i, le] of TTFT_BUCKETS.entries()) {
        cumulative += ttftCounts[i] as number;
        buckets.push(`vllm:time_to_first_token_seconds_bucket{${label},le="${le}"} ${cumulative}`);
      }
      buckets.push(
        `vllm:time_to_first_token_seconds_bucket{${label},le="+Inf"} ${ttftCount}`,
        `vllm:time_to_first_token_seconds_sum{${label}} ${ttftSum}`,
        `vllm:time_to_first_token_seconds_count{${label}} ${ttftCount}`,
      );
      family('vllm:time_to_first_token_seconds', 'histogram', 'Histogram of time to first token in seconds.', buckets);
      return `${lines.join('\n')}\n`;
    },
  };
}
export type Metrics = ReturnType<typeof createMetrics>;
