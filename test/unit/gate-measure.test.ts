import { describe, expect, it } from 'vitest';
import { judgeGate, TokenStreamReader, type GateObservation } from '../../functions/core/registry/gate-measure.js';
import { WorkloadProfile } from '../../shared/contracts/benchmark.js';

const bytes = (text: string) => new TextEncoder().encode(text);
const event = (json: unknown) => `data: ${JSON.stringify(json)}\n\n`;
const delta = (content: string) => event({ choices: [{ delta: { content } }] });

describe('TokenStreamReader', () => {
  it('times text events across split and merged chunks, skipping role, empty and [DONE] events, and reads usage', () => {
    const reader = new TokenStreamReader();
    const stream =
      event({ choices: [{ delta: { role: 'assistant' } }] }) +
      delta('Hel') +
      delta('') +
      delta('lo') +
      event({ choices: [], usage: { completion_tokens: 7 } }) +
      'data: [DONE]\n\n';
    const cut = stream.indexOf('lo') - 3;
    reader.push(bytes(stream.slice(0, cut)), 10);
    reader.push(bytes(stream.slice(cut)), 25);
    expect(reader.tokenAtMs).toEqual([10, 25]);
    expect(reader.completionTokens).toBe(7);
  });

  it('ignores lines that are not JSON rather than failing the run', () => {
    const reader = new TokenStreamReader();
    reader.push(bytes(`data: {oops\n\n: comment\n\n${delta('x')}`), 3);
    expect(reader.tokenAtMs).toEqual([3]);
    expect(reader.completionTokens).toBeNull();
  });
});

const profile = (thresholds: Record<string, number> = {}) => WorkloadProfile.parse({ name: 'smoke', requests: 4, thresholds });
const served = (first: number, gap: number, n: number, tokens: number | null = null): GateObservation => ({
  ok: true,
  tokenAtMs: Array.from({ length: n }, (_, i) => first + i * gap),
  completionTokens: tokens,
  endMs: first + (n - 1) * gap,
});

describe('judgeGate', () => {
  it('measures TTFT, inter-token gaps, latency and tokens/s, and passes within the thresholds', () => {
    const runs = [served(100, 10, 11), served(200, 20, 11), served(300, 10, 11, 20), served(400, 10, 11)];
    const result = judgeGate(runs, profile({ ttftP95Ms: 500, tokensPerSecondMin: 40 }), 1000);
    expect(result).toMatchObject({ requests: 4, errors: 0, failures: [] });
    expect(result.ttftMs).toEqual({ p50: 200, p95: 400, p99: 400 });
    expect(result.interTokenMs.p50).toBe(10);
    expect(result.interTokenMs.p99).toBe(20);
    // 11 tokens over 100 ms = 110/s, 11 over 200 ms = 55/s, 20 (usage) over 100 ms = 200/s.
    expect(result.tokensPerSecond.perRequestP50).toBe(110);
    expect(result.tokensPerSecond.aggregate).toBe(53);
    expect(result.latencyMs.p99).toBe(500);
  });

  it('names every threshold missed', () => {
    const runs = [served(900, 100, 3), { ok: false, tokenAtMs: [], completionTokens: null, endMs: 50 }];
    const result = judgeGate(runs, profile({ ttftP95Ms: 500, tokensPerSecondMin: 40, errorRateMax: 0.1 }), 2000);
    expect(result.errors).toBe(1);
    expect(result.failures).toEqual([
      'error rate 50.0 % is above the 10.0 % allowed',
      'TTFT p95 900 ms is above 500 ms',
      '15 tokens/s per request (median) is below 40',
    ]);
  });

  it('fails a run in which nothing was served, and counts a tokenless success as an error', () => {
    const result = judgeGate([{ ok: true, tokenAtMs: [], completionTokens: 0, endMs: 5 }], profile(), 5);
    expect(result.errors).toBe(1);
    expect(result.failures).toContain('no request was served');
    expect(judgeGate([], profile(), 0).failures).toContain('no request was served');
  });
});
