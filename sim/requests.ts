import { badRequest } from './errors.js';

// A long-context answer (256k tokens), so that a test can ask for one larger than any buffer the relay keeps.
const MAX_TOKENS_CAP = 262_144;
const DEFAULT_MAX_TOKENS = 16;

// A char-code loop avoids allocating an array of words for multi-megabyte prompts.
export function countWords(text: string): number {
  let count = 0;
  let inWord = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    const space = c === 32 || (c >= 9 && c <= 13) || c === 160 || c === 0x2028 || c === 0x2029 || c === 0xfeff;
    if (space) inWord = false;
    else if (!inWord) {
      inWord = true;
      count++;
    }
  }
  return count;
}

export function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Accepts epoch milliseconds or an ISO-8601 date-time; anything else is a client error. */
export function parseDeadline(raw: string): number | null {
  const text = raw.trim();
  if (/^\d+$/.test(text)) return Number(text);
  if (!/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}/.test(text)) return null;
  const ms = Date.parse(text);
  return Number.isNaN(ms) ? null : ms;
}

/** Parses an optional positive-integer token limit; null/absent means "not given". */
function tokenLimit(body: Record<string, unknown>, field: string): number | undefined {
  const v = body[field];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) throw badRequest(`${field} must be a positive integer`, field);
  return v;
}

export interface GenerationRequest {
  kind: 'chat' | 'completion';
  promptTokens: number;
  maxTokens: number;
  finishReason: 'length' | 'stop';
  stream: boolean;
  includeUsage: boolean;
}

function commonGenerationFields(body: Record<string, unknown>, kind: 'chat' | 'completion', promptTokens: number): GenerationRequest {
  const limit = kind === 'chat' ? (tokenLimit(body, 'max_completion_tokens') ?? tokenLimit(body, 'max_tokens')) : tokenLimit(body, 'max_tokens');
  const stream = body.stream;
  if (stream !== undefined && stream !== null && typeof stream !== 'boolean') throw badRequest('stream must be a boolean', 'stream');
  let includeUsage = false;
  const streamOptions = body.stream_options;
  if (streamOptions !== undefined && streamOptions !== null) {
    if (!isRecord(streamOptions)) throw badRequest('stream_options must be an object', 'stream_options');
    const iu = streamOptions.include_usage;
    if (iu !== undefined && iu !== null && typeof iu !== 'boolean') {
      throw badRequest('stream_options.include_usage must be a boolean', 'stream_options.include_usage');
    }
    includeUsage = iu === true;
  }
  return {
    kind,
    promptTokens,
    maxTokens: Math.min(limit ?? DEFAULT_MAX_TOKENS, MAX_TOKENS_CAP),
    // A caller-given limit is what ends generation (the cap stands in for the context window).
    finishReason: limit === undefined ? 'stop' : 'length',
    stream: stream === true,
    includeUsage,
  };
}

export function parseChat(body: Record<string, unknown>): GenerationRequest {
  const messages = body.messages;
  if (!Array.isArray(messages) || messages.length === 0) throw badRequest('messages must be a non-empty array', 'messages');
  let words = 0;
  for (let i = 0; i < messages.length; i++) {
    const m: unknown = messages[i];
    if (!isRecord(m) || typeof m.role !== 'string') throw badRequest('each message needs a string role', `messages[${i}].role`);
    const content = m.content;
    if (typeof content === 'string') words += countWords(content);
    else if (Array.isArray(content)) {
      for (const part of content as unknown[]) {
        if (isRecord(part) && typeof part.text === 'string') words += countWords(part.text);
      }
    } else if (content !== undefined && content !== null) {
      throw badRequest('message content must be a string or an array of parts', `messages[${i}].content`);
    }
  }
  return commonGenerationFields(body, 'chat', words);
}

export function parseCompletion(body: Record<string, unknown>): GenerationRequest {
  const prompt = body.prompt;
  let words = 0;
  if (typeof prompt === 'string') words = countWords(prompt);
  else if (Array.isArray(prompt) && prompt.length > 0) {
    // OpenAI also allows token-id arrays; each id counts as one token.
    for (const p of prompt as unknown[]) {
      if (typeof p === 'string') words += countWords(p);
      else if (typeof p === 'number') words += 1;
      else if (Array.isArray(p) && p.every((t) => typeof t === 'number')) words += p.length;
      else throw badRequest('prompt must be a string, an array of strings, or token arrays', 'prompt');
    }
  } else {
    throw badRequest('prompt is required', 'prompt');
  }
  return commonGenerationFields(body, 'completion', words);
}

export interface EmbeddingsRequest {
  inputs: string[];
  format: 'float' | 'base64';
}

export function parseEmbeddings(body: Record<string, unknown>): EmbeddingsRequest {
  const input = body.input;
  let inputs: string[];
  if (typeof input === 'string') inputs = [input];
  else if (Array.isArray(input) && input.length > 0 && input.every((s) => typeof s === 'string')) inputs = input as string[];
  else throw badRequest('input must be a string or a non-empty array of strings', 'input');
  const format = body.encoding_format;
  if (format !== undefined && format !== null && format !== 'float' && format !== 'base64') {
    throw badRequest('encoding_format must be "float" or "base64"', 'encoding_format');
  }
  return { inputs, format: format === 'base64' ? 'base64' : 'float' };
}
