import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ANSWER_TAIL_BYTES, ByteTail, NO_USAGE, parseUsage } from '../../agent/invocations/answer-tail.js';
import type { SimServerHandle } from '../../sim/options.js';
import { startSimServer } from '../../sim/server.js';

/**
 * What the agent reads from the end of a runtime's answer (agent/link/answer-tail.ts): the last bytes, whatever
 * the chunking, and the runtime's `usage` in them, as vLLM and the simulator write it.
 */

/** Feeds `bytes` to a tail in pieces of `size` bytes. */
function tailOf(bytes: Uint8Array, size: number, capacity?: number): string {
  const tail = new ByteTail(capacity);
  for (let at = 0; at < bytes.length; at += size) tail.push(bytes.subarray(at, at + size));
  return tail.text();
}

describe('ByteTail', () => {
  const text = Array.from({ length: 600 }, (_, i) => `chunk ${i};`).join('');
  const bytes = Buffer.from(text);

  it('keeps exactly the last bytes, whatever the chunk sizes', () => {
    for (const size of [1, 7, 100, 2047, 2048, 2049, 5000, bytes.length]) expect(tailOf(bytes, size), `pieces of ${size}`).toBe(text.slice(-ANSWER_TAIL_BYTES));
  });

  it('keeps everything of an answer shorter than its capacity, empty pieces included', () => {
    const tail = new ByteTail(16);
    for (const piece of ['ab', '', 'cde', '', 'f']) tail.push(Buffer.from(piece));
    expect(tail.text()).toBe('abcdef');
    expect(new ByteTail(16).text()).toBe('');
  });

  it('keeps the last bytes across pieces that straddle its capacity', () => {
    const tail = new ByteTail(8);
    tail.push(Buffer.from('0123456'));
    tail.push(Buffer.from('789'));
    expect(tail.text()).toBe('23456789');
    tail.push(Buffer.from('abcdefghij'));
    expect(tail.text()).toBe('cdefghij');
    tail.push(Buffer.from('k'));
    expect(tail.text()).toBe('defghijk');
  });
});

describe('parseUsage', () => {
  it("reads a vLLM whole answer's usage, nested details, fields after it and whitespace included", () => {
    const body =
      '{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],' +
      '"usage":{"prompt_tokens":17,"total_tokens":29,"completion_tokens":12,"prompt_tokens_details":{"cached_tokens":0}},"prompt_logprobs":null,"kv_transfer_params":null}';
    expect(parseUsage(body)).toEqual({ promptTokens: 17, completionTokens: 12 });
    expect(parseUsage('{"usage" :\n {\n  "prompt_tokens": 3,\n  "completion_tokens": 4\n }\n}\n')).toEqual({ promptTokens: 3, completionTokens: 4 });
  });

  it("reads the last chunk's usage of a stream, after chunks with `usage: null`", () => {
    const stream =
      'data: {"id":"c","choices":[{"delta":{"content":"a"}}],"usage":null}\n\n' +
      'data: {"id":"c","choices":[{"delta":{},"finish_reason":"stop"}],"usage":null}\n\n' +
      'data: {"id":"c","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}\n\n' +
      'data: [DONE]\n\n';
    expect(parseUsage(stream)).toEqual({ promptTokens: 5, completionTokens: 2 });
  });

  it('reads a usage with only prompt tokens (embeddings) as completion unknown', () => {
    expect(parseUsage('{"object":"list","data":[],"usage":{"prompt_tokens":9,"total_tokens":9}}')).toEqual({ promptTokens: 9, completionTokens: null });
  });

  it('finds nothing where there is no usage object', () => {
    for (const text of [
      '',
      'data: {"choices":[{"delta":{"content":"x"}}]}\n\ndata: [DONE]\n\n',
      // The last chunk says null: no usage was asked for.
      'data: {"choices":[],"usage":null}\n\ndata: [DONE]\n\n',
      // Cut by the start of the tail.
      'tokens":4,"completion_tokens":2}}\n\ndata: [DONE]\n\n',
      // Cut by the end of the answer (a runtime that died mid-body).
      '{"usage":{"prompt_tokens":4,"completion_tok',
      // Not JSON.
      '{"usage":{"prompt_tokens":4,,}}',
      '{"usage":"many"}',
      '{"usage"}',
    ]) {
      expect(parseUsage(text), text).toEqual(NO_USAGE);
    }
  });

  it('is not fooled by generated text that mentions usage: its quotes are escaped', () => {
    const text =
      '{"choices":[{"message":{"content":"fake \\"usage\\":{\\"prompt_tokens\\":999,\\"completion_tokens\\":999}"}}],"usage":{"prompt_tokens":1,"completion_tokens":2}}';
    expect(parseUsage(text)).toEqual({ promptTokens: 1, completionTokens: 2 });
    expect(parseUsage('{"content":"\\"usage\\":{\\"prompt_tokens\\":999}"}')).toEqual(NO_USAGE);
  });

  it('finds the end of the object past braces inside its strings', () => {
    expect(parseUsage('{"usage":{"note":"a } and a \\" and a {","prompt_tokens":2,"completion_tokens":3}}')).toEqual({ promptTokens: 2, completionTokens: 3 });
  });

  it('takes only counts: non-negative integers the end frame can carry', () => {
    const of = (prompt: string, completion: string) => parseUsage(`{"usage":{"prompt_tokens":${prompt},"completion_tokens":${completion}}}`);
    expect(of('-1', '1.5')).toEqual(NO_USAGE);
    expect(of('"3"', 'null')).toEqual(NO_USAGE);
    expect(of('4294967294', '4294967295')).toEqual({ promptTokens: 0xfffffffe, completionTokens: null });
    expect(of('0', '1e3')).toEqual({ promptTokens: 0, completionTokens: 1000 });
  });
});

describe('the usage of real simulator answers, read from their tails', () => {
  let sim: SimServerHandle;
  beforeAll(async () => {
    sim = await startSimServer({ port: 0, model: 'sim-usage', ttftMs: 0, tokensPerSecond: 0, loadMs: 0, memoryMiB: 0, failureRate: 0 });
  });
  afterAll(async () => {
    await sim?.close();
  });

  const answer = async (path: string, body: Record<string, unknown>) => {
    const response = await fetch(`${sim.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    expect(response.status).toBe(200);
    return new Uint8Array(await response.arrayBuffer());
  };
  const messages = [{ role: 'user', content: 'one two three four' }];

  it('finds the usage of whole answers (chat, completion, embeddings), however the bytes were cut', async () => {
    const cases = [
      { bytes: await answer('/v1/chat/completions', { messages, max_tokens: 6 }), usage: { promptTokens: 4, completionTokens: 6 } },
      // A long answer: the usage lies far beyond the first 2 KiB.
      { bytes: await answer('/v1/completions', { prompt: 'a b', max_tokens: 900 }), usage: { promptTokens: 2, completionTokens: 900 } },
      { bytes: await answer('/v1/embeddings', { input: ['x y z', 'w'] }), usage: { promptTokens: 4, completionTokens: null } },
    ];
    for (const { bytes, usage } of cases) for (const size of [1, 13, 4096, bytes.length]) expect(parseUsage(tailOf(bytes, size))).toEqual(usage);
  });

  it("finds a stream's usage in its final chunk when asked for, and none otherwise", async () => {
    const asked = await answer('/v1/chat/completions', { messages, max_tokens: 300, stream: true, stream_options: { include_usage: true } });
    for (const size of [5, 512, asked.length]) expect(parseUsage(tailOf(asked, size))).toEqual({ promptTokens: 4, completionTokens: 300 });
    const plain = await answer('/v1/completions', { prompt: 'a b c', max_tokens: 40, stream: true });
    expect(parseUsage(tailOf(plain, 64))).toEqual(NO_USAGE);
  });
});
