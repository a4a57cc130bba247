import { expect } from 'vitest';
import type { SimServerHandle, SimServerOptions } from '../../sim/options.js';
import { startSimServer } from '../../sim/server.js';

export const SIM_MODEL = 'sim/load-test';

/** A simulated runtime on a free loopback port, paced by `overrides`; the caller closes it. */
export async function startSim(overrides: Partial<SimServerOptions> = {}): Promise<SimServerHandle> {
  return await startSimServer({ port: 0, model: SIM_MODEL, ttftMs: 0, tokensPerSecond: 0, loadMs: 0, memoryMiB: 1024, failureRate: 0, ...overrides });
}

/** One streamed completion of `maxTokens` tokens, timed from the request: to its first token and to its end. */
export async function timedStream(server: SimServerHandle, maxTokens: number, token?: string): Promise<{ ttftMs: number; totalMs: number }> {
  const startedAt = performance.now();
  const res = await fetch(`${server.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: JSON.stringify({ model: SIM_MODEL, prompt: 'one two three', max_tokens: maxTokens, stream: true }),
  });
  expect(res.status).toBe(200);
  const decoder = new TextDecoder();
  const reader = res.body!.getReader();
  let ttftMs: number | undefined;
  for (let read = await reader.read(); !read.done; read = await reader.read()) {
    if (ttftMs === undefined && decoder.decode(read.value, { stream: true }).includes('"text":"tok')) ttftMs = performance.now() - startedAt;
  }
  return { ttftMs: ttftMs ?? Number.NaN, totalMs: performance.now() - startedAt };
}

/** One sample of the text exposition format: its name, its labels and its value. */
export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/**
 * Parses Prometheus' text exposition format strictly: every line a `# HELP`/`# TYPE` comment or a sample, every sample
 * of a family that declared its type first. Returns the samples and each family's type.
 */
export function parsePrometheusText(text: string): { samples: Sample[]; types: Map<string, string> } {
  expect(text.endsWith('\n')).toBe(true);
  const types = new Map<string, string>();
  const samples: Sample[] = [];
  for (const line of text.slice(0, -1).split('\n')) {
    const comment = /^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) (.+)$/.exec(line);
    if (comment) {
      if (comment[1] === 'TYPE') {
        expect(['counter', 'gauge', 'histogram', 'summary', 'untyped']).toContain(comment[3]);
        types.set(comment[2]!, comment[3]!);
      }
      continue;
    }
    const sample = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    expect(sample, `not a sample: ${line}`).not.toBeNull();
    const [, name, rawLabels, rawValue] = sample!;
    const labels: Record<string, string> = {};
    for (const pair of (rawLabels ?? '').split(',').filter(Boolean)) {
      const label = /^([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"$/.exec(pair);
      expect(label, `not a label: ${pair}`).not.toBeNull();
      labels[label![1]!] = label![2]!;
    }
    const value = rawValue === '+Inf' ? Number.POSITIVE_INFINITY : Number(rawValue);
    expect(Number.isNaN(value), `not a value: ${line}`).toBe(false);
    const family = types.has(name!) ? name! : name!.replace(/_(bucket|sum|count)$/, '');
    expect(types.has(family), `no TYPE before ${name}`).toBe(true);
    samples.push({ name: name!, labels, value });
  }
  return { samples, types };
}

/** The runtime's /metrics, parsed. */
export async function scrape(server: SimServerHandle, token?: string): Promise<ReturnType<typeof parsePrometheusText>> {
  const res = await fetch(`${server.url}/metrics`, { headers: token ? { authorization: `Bearer ${token}` } : {} });
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
  return parsePrometheusText(await res.text());
}

/** The value of the one sample named `name` (and carrying `le`, when given). */
export function sampleValue(samples: readonly Sample[], name: string, le?: string): number {
  const found = samples.filter((s) => s.name === name && (le === undefined || s.labels.le === le));
  expect(found, name).toHaveLength(1);
  return found[0]!.value;
}

/** Polls the runtime's metrics until `pred` holds; fails after `timeoutMs`. */
export async function waitForMetrics(server: SimServerHandle, pred: (samples: Sample[]) => boolean, token?: string, timeoutMs = 10_000): Promise<Sample[]> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const { samples } = await scrape(server, token);
    if (pred(samples)) return samples;
    if (Date.now() > until) throw new Error(`metrics never matched: ${samples.map((s) => `${s.name}=${s.value}`).join(' ')}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
