import { z } from 'zod';

/** OpenAI's error envelope, the one error shape of `/v1`. */
export const OpenAIErrorEnvelope = z.object({
  error: z.object({ message: z.string(), type: z.string(), code: z.string().nullable(), param: z.string().nullable() }),
});
export type OpenAIErrorEnvelope = z.infer<typeof OpenAIErrorEnvelope>;

/**
 * The media types a relayed answer may carry through the API origin: a runtime answering anything else (text/html,
 * a script, an image) gets its answer replaced by a 502, so that it can never serve a page under this origin.
 */
const RELAYED_MEDIA_TYPES: ReadonlySet<string> = new Set(['application/json', 'text/event-stream']);

/**
 * The Content-Type a runtime's answer is relayed with, or null when it may not be relayed. The whole value is read
 * (RFC 9110 `type "/" subtype *( OWS ";" OWS [ parameter ] )`), not only what precedes the first `;`: a list of
 * types (`application/json, text/html`, of which browsers take the last), any parameter but a UTF-8 `charset`, a
 * malformed or repeated one, or a control character refuses it. What is relayed is rebuilt from the parsed media
 * type and charset, never the runtime's bytes, so that nothing else it wrote reaches a client.
 */
export function relayableContentType(contentType: string): string | null {
  const [essence = '', ...parameters] = contentType.split(';');
  const mediaType = essence.trim().toLowerCase();
  if (!RELAYED_MEDIA_TYPES.has(mediaType)) return null;
  let charset = false;
  for (const parameter of parameters) {
    const text = parameter.trim();
    if (text === '') continue;
    const equals = text.indexOf('=');
    if (equals < 0) return null;
    const name = text.slice(0, equals).toLowerCase();
    const raw = text.slice(equals + 1);
    const value = (raw.length >= 2 && raw.startsWith('"') && raw.endsWith('"') ? raw.slice(1, -1) : raw).toLowerCase();
    if (name !== 'charset' || charset || value !== 'utf-8') return null;
    charset = true;
  }
  return charset ? `${mediaType}; charset=utf-8` : mediaType;
}

/** Control characters (NUL included) are in no deployment name: refused as a value, never echoed in a 404. */
const NO_CONTROL_CHARACTERS = /^[^\u0000-\u001f\u007f]*$/;

const common = {
  model: z.string().min(1).max(256).regex(NO_CONTROL_CHARACTERS, 'control characters are not allowed'),
  stream: z.boolean().optional(),
  stream_options: z.object({ include_usage: z.boolean().optional() }).nullable().optional(),
  max_tokens: z.number().int().positive().max(1_000_000).nullable().optional(),
  temperature: z.number().min(0).max(2).nullable().optional(),
  top_p: z.number().min(0).max(1).nullable().optional(),
  n: z.number().int().min(1).max(1).nullable().optional(),
  stop: z
    .union([z.string(), z.array(z.string()).max(4)])
    .nullable()
    .optional(),
  presence_penalty: z.number().min(-2).max(2).nullable().optional(),
  frequency_penalty: z.number().min(-2).max(2).nullable().optional(),
  seed: z.number().int().nullable().optional(),
  user: z.string().max(256).optional(),
  /** Seconds; the request's own deadline when X-LunaNexa-Deadline is absent. */
  timeout: z.number().positive().max(3600).optional(),
};

const ChatContentPart = z.object({ type: z.string() }).passthrough();
const ChatMessage = z
  .object({
    role: z.enum(['system', 'developer', 'user', 'assistant', 'tool', 'function']),
    content: z.union([z.string(), z.array(ChatContentPart), z.null()]).optional(),
  })
  .passthrough();

/** The subset of OpenAI's chat request that LunaNexa validates; other fields pass through to the runtime. */
export const ChatCompletionRequest = z
  .object({ ...common, messages: z.array(ChatMessage).min(1).max(4096), max_completion_tokens: z.number().int().positive().nullable().optional() })
  .passthrough();
export type ChatCompletionRequest = z.infer<typeof ChatCompletionRequest>;

export const CompletionRequest = z
  .object({ ...common, prompt: z.union([z.string(), z.array(z.string()).min(1).max(256), z.array(z.number().int()).min(1)]) })
  .passthrough();
export type CompletionRequest = z.infer<typeof CompletionRequest>;

export const EmbeddingRequest = z
  .object({
    model: common.model,
    input: z.union([z.string(), z.array(z.string()).min(1).max(2048), z.array(z.number().int()).min(1), z.array(z.array(z.number().int())).min(1)]),
    encoding_format: z.enum(['float', 'base64']).optional(),
    dimensions: z.number().int().positive().optional(),
    user: z.string().max(256).optional(),
    timeout: common.timeout,
  })
  .passthrough();
export type EmbeddingRequest = z.infer<typeof EmbeddingRequest>;

const ModelObject = z.object({ id: z.string(), object: z.literal('model'), created: z.number().int(), owned_by: z.string() });
export const ModelList = z.object({ object: z.literal('list'), data: z.array(ModelObject) });
export type ModelList = z.infer<typeof ModelList>;
