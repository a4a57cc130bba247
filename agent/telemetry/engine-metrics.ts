import { EngineSample } from '../../shared/contracts/telemetry.js';

/**
 * The engine metrics the agent reads, by the names vLLM and llama.cpp's server export (Prometheus text). Only these
 * are read: a runtime cannot grow what the heartbeat carries by exporting more.
 */
const NAMES: Record<string, keyof EngineSample> = {
  'vllm:num_requests_running': 'requestsRunning',
  'vllm:num_requests_waiting': 'requestsWaiting',
  'vllm:gpu_cache_usage_perc': 'kvCacheUsage',
  'vllm:kv_cache_usage_perc': 'kvCacheUsage',
  'vllm:prompt_tokens_total': 'promptTokensTotal',
  'vllm:generation_tokens_total': 'generationTokensTotal',
  'llamacpp:requests_processing': 'requestsRunning',
  'llamacpp:requests_deferred': 'requestsWaiting',
  'llamacpp:kv_cache_usage_ratio': 'kvCacheUsage',
  'llamacpp:prompt_tokens_total': 'promptTokensTotal',
  'llamacpp:tokens_predicted_total': 'generationTokensTotal',
};

/** A sample line: name, optional labels, value (an optional timestamp after it is ignored). */
const LINE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s+(\S+)/;

/**
 * The engine's sample from its metrics text: the known names, each summed over its series (a vLLM serving several
 * models, or labelled by engine); null when none of them is there (not an engine we know). Values out of the
 * contract's bounds are dropped rather than sent. Pure.
 */
export function parseEngineMetrics(text: string): EngineSample | null {
  const sums: Partial<Record<keyof EngineSample, number>> = {};
  for (const line of text.split('\n')) {
    if (line.length === 0 || line.startsWith('#')) continue;
    const match = LINE.exec(line);
    const field = match ? NAMES[match[1]!] : undefined;
    if (!field) continue;
    const value = Number(match![2]);
    if (!Number.isFinite(value)) continue;
    sums[field] = (sums[field] ?? 0) + value;
  }
  if (Object.keys(sums).length === 0) return null;
  const sample: EngineSample = {
    requestsRunning: sums.requestsRunning ?? null,
    requestsWaiting: sums.requestsWaiting ?? null,
    kvCacheUsage: sums.kvCacheUsage ?? null,
    promptTokensTotal: sums.promptTokensTotal ?? null,
    generationTokensTotal: sums.generationTokensTotal ?? null,
  };
  const checked = EngineSample.safeParse(sample);
  if (checked.success) return checked.data;
  // One value out of bounds (a KV use above 1 from a summed series): keep the others.
  for (const issue of checked.error.issues) sample[issue.path[0] as keyof EngineSample] = null;
  return sample;
}
