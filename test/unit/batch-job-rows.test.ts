import { describe, expect, it } from 'vitest';
import { ChatCompletionRequest, CompletionRequest, EmbeddingRequest } from '../../shared/contracts/openai.js';
import { BatchJobRows, JOB_KIND_URLS, rowRequest } from '../../shared/batch/job-rows.js';

const messages = [{ role: 'user', content: 'hello' }];

describe('BatchJobRows', () => {
  it('takes each kind with a model, its defaults empty unless given', () => {
    expect(BatchJobRows.parse({ kind: 'chat', model: 'sim-chat' })).toEqual({ kind: 'chat', model: 'sim-chat', defaults: {} });
    expect(BatchJobRows.parse({ kind: 'completion', model: 'm', defaults: { max_tokens: 16, temperature: 0, stop: ['\n'] } }).defaults).toEqual({
      max_tokens: 16,
      temperature: 0,
      stop: ['\n'],
    });
    expect(BatchJobRows.parse({ kind: 'embedding', model: 'm', defaults: { dimensions: 256, encoding_format: 'base64' } }).kind).toBe('embedding');
  });

  it.each([
    ['an unknown kind', { kind: 'rerank', model: 'm' }, ['kind']],
    ['no model', { kind: 'chat' }, ['model']],
    ['an empty model', { kind: 'chat', model: '' }, ['model']],
    ['a default the endpoint refuses (temperature 5)', { kind: 'chat', model: 'm', defaults: { temperature: 5 } }, ['defaults', 'temperature']],
    ['max_tokens of another type', { kind: 'completion', model: 'm', defaults: { max_tokens: 'many' } }, ['defaults', 'max_tokens']],
    ['a default of another kind (max_tokens for embeddings)', { kind: 'embedding', model: 'm', defaults: { max_tokens: 5 } }, ['defaults', 'max_tokens']],
    ['the input as a default', { kind: 'chat', model: 'm', defaults: { messages } }, ['defaults', 'messages']],
    ['streaming as a default', { kind: 'completion', model: 'm', defaults: { stream: true } }, ['defaults', 'stream']],
    ['the model as a default', { kind: 'chat', model: 'm', defaults: { model: 'other' } }, ['defaults', 'model']],
  ])('refuses %s, saying where', (_name, spec, path) => {
    const parsed = BatchJobRows.safeParse(spec);
    expect(parsed.success).toBe(false);
    expect(parsed.error?.issues.map((issue) => issue.path)).toContainEqual(path);
  });

  it('sends each kind to its endpoint', () => {
    expect(JOB_KIND_URLS).toEqual({ chat: '/v1/chat/completions', completion: '/v1/completions', embedding: '/v1/embeddings' });
  });
});

describe('rowRequest', () => {
  it('builds a chat request from the row, the model and the defaults, which the endpoint schema takes', () => {
    const request = rowRequest('chat', 'sim-chat', { max_tokens: 64, temperature: 0.5 }, { custom_id: 'q-1', messages }, 0);
    expect(request).toEqual({
      ok: true,
      customId: 'q-1',
      url: '/v1/chat/completions',
      body: { model: 'sim-chat', messages, max_tokens: 64, temperature: 0.5 },
    });
    expect(request.ok && ChatCompletionRequest.safeParse(request.body).success).toBe(true);
  });

  it('names a row without custom_id by its index, and an integer custom_id as text', () => {
    expect(rowRequest('chat', 'm', {}, { messages }, 41).customId).toBe('41');
    expect(rowRequest('chat', 'm', {}, { custom_id: null, messages }, 42).customId).toBe('42');
    expect(rowRequest('chat', 'm', {}, { custom_id: 7, messages }, 0).customId).toBe('7');
  });

  it("lets a row's parameters override the defaults, but not with null, and sends none of its other columns", () => {
    const request = rowRequest(
      'chat',
      'm',
      { max_tokens: 64, temperature: 0.5, seed: 1 },
      { messages, temperature: 0, max_tokens: null, label: 'spam', model: 'other', stream: true, n: 3 },
      0,
    );
    expect(request.ok && request.body).toEqual({ model: 'm', messages, max_tokens: 64, temperature: 0, seed: 1 });
  });

  it('reads messages given as JSON text, as a Parquet string column holds them', () => {
    const request = rowRequest('chat', 'm', {}, { messages: JSON.stringify(messages) }, 0);
    expect(request.ok && request.body.messages).toEqual(messages);
    expect(rowRequest('chat', 'm', {}, { messages: '[{"role":' }, 3)).toEqual({
      ok: false,
      customId: '3',
      error: { code: 'invalid_request', message: 'row 3: messages is text that is not JSON' },
    });
  });

  it('builds completion and embedding requests from prompt and input', () => {
    const completion = rowRequest('completion', 'm', { max_tokens: 8 }, { prompt: 'once upon' }, 0);
    expect(completion).toEqual({ ok: true, customId: '0', url: '/v1/completions', body: { model: 'm', prompt: 'once upon', max_tokens: 8 } });
    expect(completion.ok && CompletionRequest.safeParse(completion.body).success).toBe(true);
    for (const input of ['one text', ['a', 'b', 'c']]) {
      const embedding = rowRequest('embedding', 'm', { dimensions: 128 }, { input, max_tokens: 5 }, 1);
      expect(embedding).toEqual({ ok: true, customId: '1', url: '/v1/embeddings', body: { model: 'm', input, dimensions: 128 } });
      expect(embedding.ok && EmbeddingRequest.safeParse(embedding.body).success).toBe(true);
    }
  });

  it.each([
    ['no messages', 'chat', { label: 'a' }, 'row 5: messages is missing'],
    ['null messages', 'chat', { messages: null }, 'row 5: messages is missing'],
    ['no prompt', 'completion', { messages }, 'row 5: prompt is missing'],
    ['no input', 'embedding', { prompt: 'x' }, 'row 5: input is missing'],
    ['messages that are no array', 'chat', { messages: 5 }, /^row 5: messages: /],
    ['messages that are JSON of no array', 'chat', { messages: '"hello"' }, /^row 5: messages: /],
    ['an empty messages list', 'chat', { messages: [] }, /^row 5: messages: /],
    ['a prompt of another type', 'completion', { prompt: { text: 'x' } }, /^row 5: prompt: /],
    ['an empty input list', 'embedding', { input: [] }, /^row 5: input: /],
    ['a parameter out of range', 'chat', { messages, temperature: 9 }, /^row 5: temperature: /],
    ['an empty custom_id', 'chat', { custom_id: '', messages }, /^row 5: custom_id: /],
    ['a custom_id of 513 characters', 'chat', { custom_id: 'x'.repeat(513), messages }, /^row 5: custom_id: /],
    ['a custom_id that is an object', 'chat', { custom_id: { id: 1 }, messages }, /^row 5: custom_id: /],
    ['a custom_id that is a fraction', 'chat', { custom_id: 1.5, messages }, /^row 5: custom_id: /],
  ] as const)('makes %s that row error, named by its index', (_name, kind, row, message) => {
    const request = rowRequest(kind, 'm', {}, row, 5);
    expect(request).toMatchObject({ ok: false, customId: '5', error: { code: 'invalid_request' } });
    if (!request.ok) expect(request.error.message).toMatch(message);
  });

  it('keeps the custom_id of a row whose body is refused', () => {
    expect(rowRequest('chat', 'm', {}, { custom_id: 'mine', messages: [] }, 5).customId).toBe('mine');
  });

  it('never throws on a row that is no object', () => {
    for (const row of [undefined, null, 0, 'text', [], [{ messages }], true]) {
      expect(rowRequest('chat', 'm', {}, row, 2)).toEqual({
        ok: false,
        customId: '2',
        error: { code: 'invalid_request', message: 'row 2: the row is not an object' },
      });
    }
  });

  it('gives the same request for the same row every time, and leaves the row and the defaults as they were', () => {
    const defaults = Object.freeze({ max_tokens: 64 });
    const row = Object.freeze({ custom_id: 'a', messages: Object.freeze([Object.freeze({ role: 'user', content: 'x' })]), temperature: 1 });
    expect(rowRequest('chat', 'm', defaults, row, 0)).toEqual(rowRequest('chat', 'm', defaults, row, 0));
    expect(row).toEqual({ custom_id: 'a', messages: [{ role: 'user', content: 'x' }], temperature: 1 });
  });
});
