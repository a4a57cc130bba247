import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { parseSimArgs } from '../../sim/args.js';
import type { SimServerHandle, SimServerOptions, SimStats } from '../../sim/options.js';
import { startSimServer } from '../../sim/server.js';

const MODEL = 'sim/llama-test';

const open: SimServerHandle[] = [];

afterEach(async () => {
  await Promise.all(open.splice(0).map((s) => s.close()));
});

async function start(overrides: Partial<SimServerOptions> = {}): Promise<SimServerHandle> {
  const server = await startSimServer({
    port: 0,
    model: MODEL,
    ttftMs: 0,
    tokensPerSecond: Infinity,
    loadMs: 0,
    memoryMiB: 1024,
    failureRate: 0,
    ...overrides,
  });
  open.push(server);
  return server;
}

function post(server: SimServerHandle, path: string, body: unknown, headers: Record<string, string> = {}, signal?: AbortSignal): Promise<Response> {
  return fetch(`${server.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
    signal,
  });
}

function chatBody(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { model: MODEL, messages: [{ role: 'user', content: 'hello there general kenobi' }], ...extra };
}

/** Yields each SSE `data:` payload in order; throws if the stream ends mid-event. */
async function* sseData(res: Response): AsyncGenerator<string> {
  if (res.body === null) throw new Error('no body');
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      const blocks = buf.split('\n\n');
      buf = blocks.pop() ?? '';
      for (const block of blocks) {
        const lines = block.split('\n').filter((l) => l.startsWith('data: '));
        expect(lines.length).toBe(1);
        yield (lines[0] as string).slice('data: '.length);
      }
    }
    expect(buf).toBe('');
  } finally {
    reader.releaseLock();
  }
}

async function collect(res: Response): Promise<string[]> {
  const out: string[] = [];
  for await (const d of sseData(res)) out.push(d);
  return out;
}

async function stats(server: SimServerHandle): Promise<SimStats> {
  const res = await fetch(`${server.url}/sim/stats`);
  expect(res.status).toBe(200);
  return (await res.json()) as SimStats;
}

async function waitForStats(server: SimServerHandle, pred: (s: SimStats) => boolean, timeoutMs = 5000): Promise<SimStats> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const s = await stats(server);
    if (pred(s)) return s;
    if (Date.now() > until) throw new Error(`stats never matched: ${JSON.stringify(s)}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

function balanced(s: SimStats): boolean {
  return s.requests === s.completed + s.aborted + s.failed + s.active;
}

interface ErrorEnvelope {
  error: { message: string; type: string; code: string | null; param: string | null };
}

async function expectError(res: Response, status: number, fields: Partial<ErrorEnvelope['error']>): Promise<ErrorEnvelope> {
  expect(res.status).toBe(status);
  expect(res.headers.get('content-type')).toContain('application/json');
  const body = (await res.json()) as ErrorEnvelope;
  expect(typeof body.error.message).toBe('string');
  expect(body.error).toMatchObject(fields);
  expect(Object.keys(body.error).sort()).toEqual(['code', 'message', 'param', 'type']);
  return body;
}

describe('sim-server health and models', () => {
  it('reports loading until loadMs has elapsed, and refuses inference meanwhile', async () => {
    const server = await start({ loadMs: 400, instanceId: 'node-a/sim-1' });
    const early = await fetch(`${server.url}/health`);
    expect(early.status).toBe(503);
    expect(await early.json()).toEqual({ status: 'loading' });
    await expectError(await post(server, '/v1/chat/completions', chatBody()), 503, { code: 'model_loading' });

    let health: Response | undefined;
    const until = Date.now() + 5000;
    while (Date.now() < until) {
      health = await fetch(`${server.url}/health`);
      if (health.status === 200) break;
      await health.arrayBuffer();
      await new Promise((r) => setTimeout(r, 25));
    }
    expect(health?.status).toBe(200);
    expect(await health?.json()).toMatchObject({ status: 'ok', model: MODEL, instanceId: 'node-a/sim-1' });
    expect((await post(server, '/v1/chat/completions', chatBody())).status).toBe(200);
  });

  it('lists the one model in OpenAI list format', async () => {
    const server = await start();
    const res = await fetch(`${server.url}/v1/models`);
    expect(res.status).toBe(200);
    const body = (await res.json()) as { object: string; data: Array<{ id: string; object: string; owned_by: string }> };
    expect(body.object).toBe('list');
    expect(body.data).toHaveLength(1);
    expect(body.data[0]).toMatchObject({ id: MODEL, object: 'model' });
  });

  it('answers unknown paths with 404 and wrong methods with 405', async () => {
    const server = await start();
    await expectError(await fetch(`${server.url}/v2/nope`), 404, { code: 'not_found' });
    const wrong = await fetch(`${server.url}/v1/chat/completions`);
    expect(wrong.headers.get('allow')).toBe('POST');
    await expectError(wrong, 405, { code: 'method_not_allowed' });
    await expectError(await fetch(`${server.url}/health`, { method: 'POST', body: '{}' }), 405, {});
  });
});

describe('sim-server chat and completions', () => {
  it('returns a full chat completion with usage', async () => {
    const server = await start();
    const res = await post(server, '/v1/chat/completions', {
      ...chatBody({ max_tokens: 5 }),
      messages: [
        { role: 'system', content: 'be brief' },
        { role: 'user', content: [{ type: 'text', text: '  hello   there\ngeneral kenobi ' }] },
      ],
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as Record<string, any>;
    expect(body.object).toBe('chat.completion');
    expect(body.model).toBe(MODEL);
    expect(body.id).toMatch(/^chatcmpl-/);
    expect(body.choices).toHaveLength(1);
    expect(body.choices[0].message).toMatchObject({ role: 'assistant', content: 'tok0 tok1 tok2 tok3 tok4 ' });
    expect(body.choices[0].finish_reason).toBe('length');
    expect(body.usage).toEqual({ prompt_tokens: 6, completion_tokens: 5, total_tokens: 11 });
  });

  it('defaults to 16 tokens ending in "stop", honours max_completion_tokens, and caps at 262,144 (a long-context answer)', async () => {
    const server = await start();
    const dflt = (await (await post(server, '/v1/chat/completions', chatBody())).json()) as Record<string, any>;
    expect(dflt.usage.completion_tokens).toBe(16);
    expect(dflt.choices[0].finish_reason).toBe('stop');
    expect((dflt.choices[0].message.content as string).trim().split(' ').at(-1)).toBe('tok15');

    const mct = (await (await post(server, '/v1/chat/completions', chatBody({ max_completion_tokens: 3 }))).json()) as Record<string, any>;
    expect(mct.choices[0].message.content).toBe('tok0 tok1 tok2 ');

    const capped = (await (await post(server, '/v1/chat/completions', chatBody({ max_tokens: 1_000_000 }))).json()) as Record<string, any>;
    expect(capped.usage.completion_tokens).toBe(262_144);
  });

  it('streams chat chunks in order, then finish_reason, usage and [DONE]', async () => {
    const server = await start({ tokensPerSecond: 500 });
    const res = await post(server, '/v1/chat/completions', chatBody({ stream: true, max_tokens: 8, stream_options: { include_usage: true } }));
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain('text/event-stream');
    const events = await collect(res);
    expect(events.at(-1)).toBe('[DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e) as Record<string, any>);
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
    for (const c of chunks) {
      expect(c.object).toBe('chat.completion.chunk');
      expect(c.model).toBe(MODEL);
    }
    expect(chunks[0]?.choices[0].delta).toEqual({ role: 'assistant', content: '' });
    const contents = chunks
      .filter((c) => c.choices.length === 1 && typeof c.choices[0].delta.content === 'string')
      .map((c) => c.choices[0].delta.content as string);
    expect(contents.join('')).toBe('tok0 tok1 tok2 tok3 tok4 tok5 tok6 tok7 ');
    const finals = chunks.filter((c) => c.choices.length === 1 && c.choices[0].finish_reason !== null);
    expect(finals).toHaveLength(1);
    expect(finals[0]?.choices[0].finish_reason).toBe('length');
    const usageChunk = chunks.at(-1);
    expect(usageChunk?.choices).toEqual([]);
    expect(usageChunk?.usage).toEqual({ prompt_tokens: 4, completion_tokens: 8, total_tokens: 12 });
    // As OpenAI does: with include_usage every other chunk carries usage: null.
    expect(chunks.slice(0, -1).every((c) => c.usage === null)).toBe(true);
    expect((await stats(server)).completed).toBe(1);
  });

  it('omits the usage chunk without include_usage and finishes with "stop" by default', async () => {
    const server = await start();
    const events = await collect(await post(server, '/v1/chat/completions', chatBody({ stream: true })));
    expect(events.at(-1)).toBe('[DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e) as Record<string, any>);
    expect(chunks.every((c) => !('usage' in c))).toBe(true);
    expect(chunks.at(-1)?.choices[0].finish_reason).toBe('stop');
    expect(chunks.filter((c) => typeof c.choices[0]?.delta?.content === 'string' && c.choices[0].delta.content !== '')).toHaveLength(16);
  });

  it('waits ttftMs before the first token and paces the rest', async () => {
    const server = await start({ ttftMs: 150, tokensPerSecond: 200 });
    const t0 = Date.now();
    const res = await post(server, '/v1/chat/completions', chatBody({ stream: true, max_tokens: 20 }));
    let firstTokenAt = 0;
    const contents: string[] = [];
    for await (const d of sseData(res)) {
      if (d === '[DONE]') break;
      const c = JSON.parse(d) as Record<string, any>;
      const content = c.choices[0]?.delta?.content;
      if (typeof content === 'string' && content !== '') {
        if (firstTokenAt === 0) firstTokenAt = Date.now();
        contents.push(content);
      }
    }
    // Only a lower bound: timers never fire early by more than clock rounding.
    expect(firstTokenAt - t0).toBeGreaterThanOrEqual(140);
    expect(contents).toEqual(Array.from({ length: 20 }, (_, i) => `tok${i} `));
  });

  it('serves /v1/completions streaming and non-streaming', async () => {
    const server = await start();
    const full = await post(server, '/v1/completions', { model: MODEL, prompt: 'once upon a time', max_tokens: 4 });
    expect(full.status).toBe(200);
    const body = (await full.json()) as Record<string, any>;
    expect(body.object).toBe('text_completion');
    expect(body.id).toMatch(/^cmpl-/);
    expect(body.choices[0]).toMatchObject({ text: 'tok0 tok1 tok2 tok3 ', index: 0, finish_reason: 'length' });
    expect(body.usage).toEqual({ prompt_tokens: 4, completion_tokens: 4, total_tokens: 8 });

    const events = await collect(
      await post(server, '/v1/completions', { prompt: ['a b', 'c'], max_tokens: 3, stream: true, stream_options: { include_usage: true } }),
    );
    expect(events.at(-1)).toBe('[DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e) as Record<string, any>);
    expect(chunks.every((c) => c.object === 'text_completion')).toBe(true);
    expect(
      chunks
        .filter((c) => c.choices.length === 1)
        .map((c) => c.choices[0].text as string)
        .join(''),
    ).toBe('tok0 tok1 tok2 ');
    expect(chunks.at(-2)?.choices[0].finish_reason).toBe('length');
    expect(chunks.at(-1)?.usage).toEqual({ prompt_tokens: 3, completion_tokens: 3, total_tokens: 6 });
  });
});

describe('sim-server embeddings', () => {
  it('returns deterministic unit 16-dim vectors for a string or an array', async () => {
    const server = await start();
    const one = (await (await post(server, '/v1/embeddings', { model: MODEL, input: 'alpha beta' })).json()) as Record<string, any>;
    expect(one.object).toBe('list');
    expect(one.model).toBe(MODEL);
    expect(one.data).toHaveLength(1);
    expect(one.data[0]).toMatchObject({ object: 'embedding', index: 0 });
    const v = one.data[0].embedding as number[];
    expect(v).toHaveLength(16);
    expect(Math.hypot(...v)).toBeCloseTo(1, 6);
    expect(one.usage).toEqual({ prompt_tokens: 2, total_tokens: 2 });

    const many = (await (await post(server, '/v1/embeddings', { input: ['gamma', 'alpha beta', 'gamma'] })).json()) as Record<string, any>;
    expect(many.data.map((d: any) => d.index)).toEqual([0, 1, 2]);
    expect(many.data[1].embedding).toEqual(v);
    expect(many.data[0].embedding).toEqual(many.data[2].embedding);
    expect(many.data[0].embedding).not.toEqual(v);

    // Determinism must hold across processes/instances, not just within one.
    const other = await start({ seed: 9 });
    const again = (await (await post(other, '/v1/embeddings', { input: 'alpha beta' })).json()) as Record<string, any>;
    expect(again.data[0].embedding).toEqual(v);
  });

  it('supports base64 encoding as the OpenAI SDKs request it', async () => {
    const server = await start();
    const float = (await (await post(server, '/v1/embeddings', { input: 'x' })).json()) as Record<string, any>;
    const b64 = (await (await post(server, '/v1/embeddings', { input: 'x', encoding_format: 'base64' })).json()) as Record<string, any>;
    const buf = Buffer.from(b64.data[0].embedding as string, 'base64');
    const decoded = Array.from(new Float32Array(buf.buffer, buf.byteOffset, buf.byteLength / 4));
    expect(decoded).toHaveLength(16);
    for (const [i, x] of decoded.entries()) expect(x).toBeCloseTo(float.data[0].embedding[i] as number, 6);
  });

  it('rejects bad input with param', async () => {
    const server = await start();
    await expectError(await post(server, '/v1/embeddings', { input: 42 }), 400, { type: 'invalid_request_error', param: 'input' });
    await expectError(await post(server, '/v1/embeddings', { input: [] }), 400, { param: 'input' });
  });
});

describe('sim-server fault injection', () => {
  it('fails non-streaming requests with a 500 OpenAI error envelope', async () => {
    const server = await start({ failureRate: 1 });
    await expectError(await post(server, '/v1/chat/completions', chatBody()), 500, {
      type: 'server_error',
      code: 'simulated_failure',
      param: null,
    });
    await expectError(await post(server, '/v1/embeddings', { input: 'x' }), 500, { code: 'simulated_failure' });
    const s = await stats(server);
    expect(s).toMatchObject({ requests: 2, failed: 2, completed: 0, active: 0 });
  });

  it('fails streams after the first token with an error event and no [DONE]', async () => {
    const server = await start({ failureRate: 1 });
    const res = await post(server, '/v1/chat/completions', chatBody({ stream: true, max_tokens: 50 }));
    expect(res.status).toBe(200);
    const events = await collect(res);
    expect(events).not.toContain('[DONE]');
    const parsed = events.map((e) => JSON.parse(e) as Record<string, any>);
    const tokens = parsed.filter((p) => typeof p.choices?.[0]?.delta?.content === 'string' && p.choices[0].delta.content !== '');
    expect(tokens.map((t) => t.choices[0].delta.content)).toEqual(['tok0 ']);
    expect(parsed.at(-1)).toEqual({
      error: { message: expect.any(String), type: 'server_error', code: 'simulated_failure', param: null },
    });
    expect((await stats(server)).failed).toBe(1);
  });

  it('makes the fault pattern reproducible with a seed', async () => {
    const pattern = async (seed: number): Promise<number[]> => {
      const server = await start({ failureRate: 0.5, seed });
      const statuses: number[] = [];
      for (let i = 0; i < 24; i++) {
        const res = await post(server, '/v1/completions', { prompt: 'x', max_tokens: 1 });
        await res.arrayBuffer();
        statuses.push(res.status);
      }
      return statuses;
    };
    const a = await pattern(1234);
    const b = await pattern(1234);
    expect(a).toEqual(b);
    expect(a).toContain(200);
    expect(a).toContain(500);
  });
});

describe('sim-server cancellation and deadlines', () => {
  it('counts a client disconnect mid-stream as aborted and stops generating', async () => {
    const server = await start({ tokensPerSecond: 20 });
    const ac = new AbortController();
    const res = await post(server, '/v1/chat/completions', chatBody({ stream: true, max_tokens: 1000 }), {}, ac.signal);
    const seen: string[] = [];
    for await (const d of sseData(res)) {
      seen.push(d);
      if (d.includes('tok0 ')) break;
    }
    expect(seen.some((d) => d.includes('tok0 '))).toBe(true);
    expect((await stats(server)).active).toBe(1);
    ac.abort();
    const s = await waitForStats(server, (x) => x.aborted === 1);
    expect(s).toMatchObject({ requests: 1, aborted: 1, active: 0, completed: 0, failed: 0 });
  });

  it('answers 504 when the deadline has already passed (ISO or epoch ms) and records it', async () => {
    const server = await start();
    const past = new Date(Date.now() - 1000).toISOString();
    await expectError(await post(server, '/v1/chat/completions', chatBody(), { 'X-LunaNexa-Deadline': past }), 504, {
      code: 'deadline_exceeded',
    });
    expect((await stats(server)).lastDeadline).toBe(past);

    const pastMs = Date.now() - 5;
    await expectError(await post(server, '/v1/completions', { prompt: 'x' }, { 'X-LunaNexa-Deadline': String(pastMs) }), 504, {});
    const s = await stats(server);
    expect(s.lastDeadline).toBe(new Date(pastMs).toISOString());
    expect(s).toMatchObject({ requests: 2, failed: 2, completed: 0 });

    const future = Date.now() + 60_000;
    expect((await post(server, '/v1/completions', { prompt: 'x' }, { 'X-LunaNexa-Deadline': String(future) })).status).toBe(200);
    expect((await stats(server)).lastDeadline).toBe(new Date(future).toISOString());

    await expectError(await post(server, '/v1/completions', { prompt: 'x' }, { 'X-LunaNexa-Deadline': 'tomorrow-ish' }), 400, {
      type: 'invalid_request_error',
    });
  });

  it('stops a stream when the deadline passes mid-generation and counts it aborted', async () => {
    const server = await start({ tokensPerSecond: 50 });
    const deadline = new Date(Date.now() + 300).toISOString();
    const res = await post(server, '/v1/chat/completions', chatBody({ stream: true, max_tokens: 1000 }), { 'X-LunaNexa-Deadline': deadline });
    expect(res.status).toBe(200);
    const events = await collect(res);
    expect(events).not.toContain('[DONE]');
    const tokenCount = events.filter((e) => e.includes('"content":"tok')).length;
    expect(tokenCount).toBeGreaterThan(0);
    expect(tokenCount).toBeLessThan(1000);
    expect(JSON.parse(events.at(-1) as string)).toMatchObject({ error: { code: 'deadline_exceeded' } });
    const s = await waitForStats(server, (x) => x.active === 0);
    expect(s).toMatchObject({ aborted: 1, completed: 0, failed: 0 });
  });

  it('answers 504 when a non-streaming generation outlives its deadline', async () => {
    const server = await start({ ttftMs: 2000 });
    const res = await post(server, '/v1/chat/completions', chatBody(), { 'X-LunaNexa-Deadline': String(Date.now() + 150) });
    await expectError(res, 504, { code: 'deadline_exceeded' });
    expect(await stats(server)).toMatchObject({ aborted: 1, active: 0 });
  });

  it('records the Idempotency-Key of the latest inference request', async () => {
    const server = await start();
    expect((await stats(server)).lastIdempotencyKey).toBeNull();
    await (await post(server, '/v1/chat/completions', chatBody(), { 'Idempotency-Key': 'idem-7f3a' })).arrayBuffer();
    expect((await stats(server)).lastIdempotencyKey).toBe('idem-7f3a');
    expect(server.stats().lastIdempotencyKey).toBe('idem-7f3a');
  });

  it('close() cuts open streams, counting them aborted', async () => {
    const server = await start({ tokensPerSecond: 5 });
    const res = await post(server, '/v1/chat/completions', chatBody({ stream: true, max_tokens: 1000 }));
    const reading = collect(res).catch(() => 'cut');
    await waitForStats(server, (x) => x.active === 1);
    await server.close();
    expect(await reading).toBe('cut');
    expect(server.stats()).toMatchObject({ aborted: 1, active: 0 });
  });
});

describe('sim-server bad input', () => {
  it('rejects malformed JSON with 400 and keeps serving', async () => {
    const server = await start();
    await expectError(await post(server, '/v1/chat/completions', '{"messages": [nope'), 400, { type: 'invalid_request_error' });
    await expectError(await post(server, '/v1/chat/completions', '[1,2]'), 400, { type: 'invalid_request_error' });
    expect((await post(server, '/v1/chat/completions', chatBody())).status).toBe(200);
  });

  it('names the missing or invalid field in param', async () => {
    const server = await start();
    await expectError(await post(server, '/v1/chat/completions', { model: MODEL }), 400, { param: 'messages' });
    await expectError(await post(server, '/v1/chat/completions', { messages: [] }), 400, { param: 'messages' });
    await expectError(await post(server, '/v1/completions', { model: MODEL }), 400, { param: 'prompt' });
    await expectError(await post(server, '/v1/completions', { prompt: 'x', max_tokens: -3 }), 400, { param: 'max_tokens' });
    await expectError(await post(server, '/v1/chat/completions', chatBody({ stream: 'yes' })), 400, { param: 'stream' });
  });

  it('answers 404 model_not_found for another model', async () => {
    const server = await start();
    await expectError(await post(server, '/v1/chat/completions', chatBody({ model: 'gpt-x' })), 404, {
      type: 'invalid_request_error',
      code: 'model_not_found',
      param: 'model',
    });
  });

  it('answers 413 for bodies over 4 MiB', async () => {
    const server = await start();
    const huge = JSON.stringify({ prompt: 'x'.repeat(4 * 1024 * 1024 + 10) });
    await expectError(await post(server, '/v1/completions', huge), 413, {});
    expect((await post(server, '/v1/completions', { prompt: 'still alive' })).status).toBe(200);
    const s = await stats(server);
    expect(balanced(s)).toBe(true);
    expect(s).toMatchObject({ requests: 2, failed: 1, completed: 1 });
  });
});

describe('sim-server throughput', () => {
  it('streams 20,000 tokens as fast as possible, all in order', async () => {
    const server = await start({ tokensPerSecond: 0 });
    let total = 0;
    // The per-request cap is 4096, so the 20,000 tokens arrive over five back-to-back streams.
    for (let r = 0; r < 5; r++) {
      const res = await post(server, '/v1/completions', { prompt: 'go', max_tokens: 4000, stream: true });
      let expected = 0;
      let done = false;
      for await (const d of sseData(res)) {
        if (d === '[DONE]') {
          done = true;
          continue;
        }
        const text = (JSON.parse(d) as { choices: Array<{ text: string }> }).choices[0]?.text;
        if (text === undefined || text === '') continue;
        expect(text).toBe(`tok${expected} `);
        expected++;
      }
      expect(done).toBe(true);
      expect(expected).toBe(4000);
      total += expected;
    }
    expect(total).toBe(20_000);
    const s = await stats(server);
    expect(s).toMatchObject({ requests: 5, completed: 5, active: 0 });
  });
});

describe('parseSimArgs', () => {
  it('parses every flag in both --flag value and --flag=value forms', () => {
    const opts = parseSimArgs([
      '--port',
      '8123',
      '--host=0.0.0.0',
      '--model',
      MODEL,
      '--ttft-ms=25',
      '--tokens-per-second',
      'Infinity',
      '--load-ms',
      '100',
      '--memory-mib',
      '2048',
      '--failure-rate',
      '0.25',
      '--instance-id',
      'i-1',
      '--seed',
      '7',
    ]);
    expect(opts).toEqual({
      port: 8123,
      host: '0.0.0.0',
      model: MODEL,
      ttftMs: 25,
      tokensPerSecond: Infinity,
      loadMs: 100,
      memoryMiB: 2048,
      failureRate: 0.25,
      instanceId: 'i-1',
      seed: 7,
    });
  });

  it('defaults everything but --model', () => {
    expect(parseSimArgs(['--model', 'm'])).toMatchObject({ port: 0, host: '127.0.0.1', ttftMs: 0, failureRate: 0, loadMs: 0 });
  });

  it.each([
    [['--model', 'm', '--port', 'abc'], /--port: expected a number/],
    [['--model', 'm', '--port', '70000'], /--port/],
    [['--model', 'm', '--port', ''], /--port/],
    [['--model', 'm', '--failure-rate', '1.5'], /--failure-rate/],
    [['--model', 'm', '--ttft-ms', '-1'], /--ttft-ms/],
    [['--model', 'm', '--tokens-per-second', 'fast'], /--tokens-per-second/],
    [['--model', 'm', '--seed', '1.5'], /--seed/],
    [['--port', '1'], /--model: is required/],
    [['--model', 'm', '--verbose'], /unknown flag --verbose/],
    [['--model'], /--model needs a value/],
    [['--model', 'm', '--model', 'n'], /--model given more than once/],
    [['m'], /unexpected argument/],
  ])('rejects %j', (argv, message) => {
    expect(() => parseSimArgs(argv)).toThrow(message);
  });
});

describe('sim-server CLI', () => {
  const script = fileURLToPath(new URL('../../sim/main.ts', import.meta.url));
  // `--import tsx` resolves from the working directory, so pin it to the repo root.
  const cwd = fileURLToPath(new URL('../../', import.meta.url));

  it('prints the listening line, serves, and exits cleanly on SIGTERM', async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', script, '--model', MODEL, '--port', '0'], { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    try {
      const line = await new Promise<string>((resolve, reject) => {
        const rl = createInterface({ input: child.stdout });
        rl.once('line', resolve);
        child.once('exit', (code) => reject(new Error(`exited early with ${code}`)));
      });
      const event = JSON.parse(line) as { event: string; port: number };
      expect(event.event).toBe('listening');
      expect(event.port).toBeGreaterThan(0);
      const health = await fetch(`http://127.0.0.1:${event.port}/health`);
      expect(await health.json()).toMatchObject({ status: 'ok', model: MODEL });
      const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  });

  it('exits non-zero with a clear message on bad flags', async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', script, '--model', MODEL, '--port', 'nope'], { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)));
    expect(code).toBe(2);
    expect(stderr).toContain('--port');
  });
});
