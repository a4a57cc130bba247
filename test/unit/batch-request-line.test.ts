import { describe, expect, it } from 'vitest';
import { BatchRequestLine, MAX_REQUEST_LINE_BYTES, parseRequestLine } from '../../shared/batch/request-line.js';

const chat = { model: 'sim-chat', messages: [{ role: 'user', content: 'hello' }] };
const line = (over: Record<string, unknown> = {}) => JSON.stringify({ custom_id: 'req-1', method: 'POST', url: '/v1/chat/completions', body: chat, ...over });

const EMPTY_LINE_BYTES = line({ body: { ...chat, messages: [{ role: 'user', content: '' }] } }).length;

/** A valid chat line of exactly `bytes` UTF-8 bytes, its content padded with `pad` (1, 2, 3 or 4 bytes each). */
function lineOfBytes(bytes: number, pad = 'a'): string {
  const padBytes = new TextEncoder().encode(pad).length;
  const fill = bytes - EMPTY_LINE_BYTES;
  expect(fill % padBytes).toBe(0);
  return line({ body: { ...chat, messages: [{ role: 'user', content: pad.repeat(fill / padBytes) }] } });
}

describe('parseRequestLine', () => {
  it('reads a request to each endpoint, its body as /v1 takes it, unknown body fields kept', () => {
    const toChat = parseRequestLine(line({ body: { ...chat, tools: [{ type: 'function' }], temperature: 0.2 } }), 0, '/v1/chat/completions');
    expect(toChat).toEqual({
      ok: true,
      line: {
        custom_id: 'req-1',
        method: 'POST',
        url: '/v1/chat/completions',
        body: { ...chat, tools: [{ type: 'function' }], temperature: 0.2 },
      },
    });
    const completion = parseRequestLine(line({ url: '/v1/completions', body: { model: 'm', prompt: 'once upon' } }), 1, '/v1/completions');
    expect(completion.ok && completion.line.url).toBe('/v1/completions');
    const embedding = parseRequestLine(line({ url: '/v1/embeddings', body: { model: 'm', input: ['a', 'b'] } }), 2, '/v1/embeddings');
    expect(embedding.ok && embedding.line.body).toEqual({ model: 'm', input: ['a', 'b'] });
  });

  it.each([
    ['{', 'not JSON'],
    ['not json', 'a word'],
    ['', 'empty'],
    ['{"custom_id":"a"} {"custom_id":"b"}', 'two values on a line'],
    ["{'custom_id':'a'}", 'single quotes'],
    ['{"custom_id":"a",}', 'a trailing comma'],
  ])('refuses %j (%s) as invalid_json, naming the row', (text) => {
    expect(parseRequestLine(text, 7, '/v1/chat/completions')).toEqual({
      ok: false,
      customId: null,
      error: { code: 'invalid_json', message: 'row 7: the line is not JSON' },
    });
  });

  it.each(['[]', '42', '"text"', 'null', 'true'])('refuses %s, JSON but no object, as invalid_request', (text) => {
    expect(parseRequestLine(text, 0, '/v1/chat/completions')).toEqual({
      ok: false,
      customId: null,
      error: { code: 'invalid_request', message: 'row 0: the line is not a JSON object' },
    });
  });

  it("refuses a line to another endpoint than the batch's as url_mismatch, keeping its custom_id", () => {
    expect(parseRequestLine(line(), 3, '/v1/embeddings')).toEqual({
      ok: false,
      customId: 'req-1',
      error: { code: 'url_mismatch', message: `row 3: url "/v1/chat/completions" is not the batch's endpoint /v1/embeddings` },
    });
    for (const url of ['/v1/responses', '/v1/chat/completions/', 'https://api.openai.com/v1/chat/completions', 42, null]) {
      const parsed = parseRequestLine(line({ url }), 0, '/v1/chat/completions');
      expect(parsed.ok || parsed.error.code).toBe('url_mismatch');
    }
    const missing = parseRequestLine(JSON.stringify({ custom_id: 'x', method: 'POST', body: chat }), 0, '/v1/chat/completions');
    expect(missing).toMatchObject({ ok: false, customId: 'x', error: { code: 'url_mismatch', message: expect.stringContaining('url undefined') } });
  });

  it('quotes a long url cut, so that an error line does not repeat a huge input', () => {
    const parsed = parseRequestLine(line({ url: `/v1/${'x'.repeat(10_000)}` }), 0, '/v1/chat/completions');
    expect(parsed.ok).toBe(false);
    if (!parsed.ok) expect(parsed.error.message.length).toBeLessThan(200);
  });

  it.each([
    ['a missing custom_id', { custom_id: undefined }, null, 'custom_id'],
    ['an empty custom_id', { custom_id: '' }, null, 'custom_id'],
    ['a custom_id of 513 characters', { custom_id: 'x'.repeat(513) }, null, 'custom_id'],
    ['a custom_id that is a number', { custom_id: 7 }, null, 'custom_id'],
    ['a GET', { method: 'GET' }, 'req-1', 'method'],
    ['a body that is no object', { body: 'hello' }, 'req-1', 'body'],
    ['a body without messages', { body: { model: 'm' } }, 'req-1', 'body.messages'],
    ['no messages', { body: { model: 'm', messages: [] } }, 'req-1', 'body.messages'],
    ['a message of no known role', { body: { model: 'm', messages: [{ role: 'robot', content: 'x' }] } }, 'req-1', 'body.messages.0.role'],
    ['a body without model', { body: { messages: chat.messages } }, 'req-1', 'body.model'],
    ['a temperature out of range', { body: { ...chat, temperature: 3 } }, 'req-1', 'body.temperature'],
    ['max_tokens that is text', { body: { ...chat, max_tokens: '100' } }, 'req-1', 'body.max_tokens'],
    ['a streamed request', { body: { ...chat, stream: true } }, 'req-1', 'body.stream'],
  ])('refuses %s as invalid_request, saying where', (_name, over, customId, path) => {
    const parsed = parseRequestLine(line(over), 4, '/v1/chat/completions');
    expect(parsed).toMatchObject({ ok: false, customId, error: { code: 'invalid_request' } });
    if (!parsed.ok) expect(parsed.error.message.startsWith(`row 4: ${path}: `)).toBe(true);
  });

  it('takes a custom_id of exactly 512 characters and an unstreamed request that says so', () => {
    expect(parseRequestLine(line({ custom_id: 'x'.repeat(512) }), 0, '/v1/chat/completions').ok).toBe(true);
    expect(parseRequestLine(line({ body: { ...chat, stream: false } }), 0, '/v1/chat/completions').ok).toBe(true);
  });

  it('refuses an embedding body that the chat schema would take, and the reverse', () => {
    const asEmbedding = parseRequestLine(line({ url: '/v1/embeddings' }), 0, '/v1/embeddings');
    expect(asEmbedding.ok || asEmbedding.error.message).toMatch(/^row 0: body\.input: /);
    const asChat = parseRequestLine(line({ body: { model: 'm', input: 'x' } }), 0, '/v1/chat/completions');
    expect(asChat.ok || asChat.error.message).toMatch(/^row 0: body\.messages: /);
  });

  it('takes a line of exactly the largest size in UTF-8 bytes, and refuses one byte more as too_long', () => {
    expect(parseRequestLine(lineOfBytes(MAX_REQUEST_LINE_BYTES), 0, '/v1/chat/completions').ok).toBe(true);
    expect(parseRequestLine(lineOfBytes(MAX_REQUEST_LINE_BYTES + 1), 9, '/v1/chat/completions')).toEqual({
      ok: false,
      customId: null,
      error: { code: 'too_long', message: `row 9: the line is longer than ${MAX_REQUEST_LINE_BYTES} bytes` },
    });
  });

  it('counts bytes, not characters: two-, three- and four-byte characters', () => {
    // Fewer characters than the bound, more bytes: too long.
    for (const pad of ['é', '中', '😀']) {
      const over = lineOfBytes(MAX_REQUEST_LINE_BYTES + new TextEncoder().encode(pad).length, pad);
      expect(over.length).toBeLessThan(MAX_REQUEST_LINE_BYTES);
      expect(parseRequestLine(over, 0, '/v1/chat/completions').ok || 'too_long').toBe('too_long');
    }
    // At the bound in bytes: taken. Four-byte characters fill 4 bytes at a time: the largest such line under it.
    expect(parseRequestLine(lineOfBytes(MAX_REQUEST_LINE_BYTES - ((MAX_REQUEST_LINE_BYTES - EMPTY_LINE_BYTES) % 2), 'é'), 0, '/v1/chat/completions').ok).toBe(
      true,
    );
    const emoji = lineOfBytes(MAX_REQUEST_LINE_BYTES - ((MAX_REQUEST_LINE_BYTES - EMPTY_LINE_BYTES) % 4), '😀');
    expect(emoji.length).toBeLessThan(MAX_REQUEST_LINE_BYTES);
    expect(parseRequestLine(emoji, 0, '/v1/chat/completions').ok).toBe(true);
  });

  it('never throws, whatever the line holds', () => {
    const deep = `${'['.repeat(100_000)}${']'.repeat(100_000)}`;
    const weird = [
      deep,
      line({ body: { ...chat, extra: 'DEEP' } }).replace('"DEEP"', deep),
      '{"__proto__":{"custom_id":"x"},"custom_id":"y","method":"POST","url":"/v1/chat/completions","body":{}}',
      '\u0000',
      '\uFEFF{}',
      '{"custom_id":"\\ud800","method":"POST","url":"/v1/embeddings","body":{"model":"m","input":"\\ud800"}}',
    ];
    for (const text of weird) expect(() => parseRequestLine(text, 0, '/v1/chat/completions')).not.toThrow();
    // Nesting that a recursive reader would overflow on: the top level is no object, and deep in a body it is passed on.
    expect(parseRequestLine(weird[0]!, 0, '/v1/chat/completions')).toMatchObject({ ok: false, error: { code: 'invalid_request' } });
    expect(parseRequestLine(weird[1]!, 0, '/v1/chat/completions').ok).toBe(true);
    expect(parseRequestLine(weird[2]!, 0, '/v1/chat/completions')).toMatchObject({ ok: false, customId: 'y', error: { code: 'invalid_request' } });
  });

  it('is the schema BatchRequestLine checks, so a line built elsewhere is refused the same way', () => {
    expect(BatchRequestLine.safeParse(JSON.parse(line())).success).toBe(true);
    expect(BatchRequestLine.safeParse(JSON.parse(line({ body: { ...chat, stream: true } }))).success).toBe(false);
    expect(BatchRequestLine.safeParse({ ...JSON.parse(line()), url: '/v1/models' }).success).toBe(false);
  });
});
