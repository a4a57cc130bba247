import { z } from 'zod';
import { ChatCompletionRequest, CompletionRequest, EmbeddingRequest } from '../contracts/openai.js';
import type { BatchEndpoint } from '../contracts/openai-batch.js';
import { describeIssue, quote, type RowError } from './row-error.js';

/**
 * Largest input line, in UTF-8 bytes without its line break: the default largest `/v1` request body
 * (`inferenceMaxBodyBytes`), so that no line is accepted whose body the endpoint would refuse, and a reader holds at
 * most this much of one line.
 */
export const MAX_REQUEST_LINE_BYTES = 4 * 1024 * 1024;

/** A row's own name for itself, given back with its answer: OpenAI's bound. */
export const CustomId = z.string().min(1).max(512);

/** The request body each endpoint takes: the schemas `/v1` checks, so that a batch row is refused as `/v1` would. */
export const BATCH_BODIES = {
  '/v1/chat/completions': ChatCompletionRequest,
  '/v1/completions': CompletionRequest,
  '/v1/embeddings': EmbeddingRequest,
} as const satisfies Record<BatchEndpoint, z.ZodType>;

// A batch writes one answer per row: a stream of events has no place in an output line.
const notStreamed = (body: Record<string, unknown>) => body.stream !== true;
const NOT_STREAMED = { message: 'a batch row cannot stream', path: ['stream'] };

const line = { custom_id: CustomId, method: z.literal('POST') };

/** One line of an OpenAI Batch API input file: a request to one of the batch endpoints, its body as `/v1` takes it. */
export const BatchRequestLine = z.discriminatedUnion('url', [
  z.object({ ...line, url: z.literal('/v1/chat/completions'), body: ChatCompletionRequest.refine(notStreamed, NOT_STREAMED) }),
  z.object({ ...line, url: z.literal('/v1/completions'), body: CompletionRequest.refine(notStreamed, NOT_STREAMED) }),
  z.object({ ...line, url: z.literal('/v1/embeddings'), body: EmbeddingRequest.refine(notStreamed, NOT_STREAMED) }),
]);
export type BatchRequestLine = z.infer<typeof BatchRequestLine>;

/** Why a line is no request: not JSON, not a request, not to the batch's endpoint, or longer than a line may be. */
type RequestLineError = RowError & { code: 'invalid_json' | 'invalid_request' | 'url_mismatch' | 'too_long' };

/**
 * A line as a request, or why not, with its `custom_id` where the line has a valid one (an error line names it).
 * `lineIndex` is the row's 0-based index (blank lines not counted), named in messages. Never throws.
 */
export type ParsedRequestLine = { ok: true; line: BatchRequestLine } | { ok: false; customId: string | null; error: RequestLineError };

export function parseRequestLine(text: string, lineIndex: number, expectedUrl: BatchEndpoint): ParsedRequestLine {
  const fail = (code: RequestLineError['code'], message: string, customId: string | null = null): ParsedRequestLine => ({
    ok: false,
    customId,
    error: { code, message: `row ${lineIndex}: ${message}` },
  });
  if (overLineBound(text)) return fail('too_long', `the line is longer than ${MAX_REQUEST_LINE_BYTES} bytes`);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return fail('invalid_json', 'the line is not JSON');
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return fail('invalid_request', 'the line is not a JSON object');
  const fields = value as Record<string, unknown>;
  const id = CustomId.safeParse(fields.custom_id);
  const customId = id.success ? id.data : null;
  if (fields.url !== expectedUrl) return fail('url_mismatch', `url ${quote(fields.url)} is not the batch's endpoint ${expectedUrl}`, customId);
  const parsed = BatchRequestLine.safeParse(value);
  if (!parsed.success) return fail('invalid_request', describeIssue(parsed.error), customId);
  return { ok: true, line: parsed.data };
}

/** Whether a line's UTF-8 length is over the bound, counted rather than encoded: a long line is not copied to be measured. */
function overLineBound(text: string): boolean {
  // A UTF-16 unit is 1 to 3 bytes (a surrogate pair 4 for 2): only a long string can be over the bound.
  if (text.length * 3 <= MAX_REQUEST_LINE_BYTES) return false;
  let bytes = 0;
  for (let i = 0; i < text.length; i += 1) {
    const unit = text.charCodeAt(i);
    if (unit < 0x80) bytes += 1;
    else if (unit < 0x800) bytes += 2;
    else if (unit >= 0xd800 && unit <= 0xdbff && (text.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      bytes += 4;
      i += 1;
    } else bytes += 3;
  }
  return bytes > MAX_REQUEST_LINE_BYTES;
}
