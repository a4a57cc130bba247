import { z } from 'zod';

/** OpenAI's error envelope, the one error shape of `/v1`. */
export const OpenAIErrorEnvelope = z.object({
  error: z.object({ message: z.string(), type: z.string(), code: z.string().nullable(), param: z.string().nullable() }),
});
export type OpenAIErrorEnvelope = z.infer<typeof OpenAIErrorEnvelope>;

const common = {
  model: z.string().min(1).max(256),
  stream: z.boolean().optional(),
  stream_options: z.object({ include_usage: z.boolean().optional() }).nullable().optional(),
  max_tokens: z.number().int().positive().max(1_000_000).nullable().optional(),
  temperature: z.number().min(0).max(2).nullable().optional(),
  top_p: z.number().min(0).max(1).nullable().optional(),
  n: z.number().int().min(1).max(1).nullable().optional(),
  stop: z.union([z.string(), z.array(z.string()).max(4)]).nullable().optional(),
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

export const ModelObject = z.object({ id: z.string(), object: z.literal('model'), created: z.number().int(), owned_by: z.string() });
export const ModelList = z.object({ object: z.literal('list'), data: z.array(ModelObject) });
export type ModelList = z.infer<typeof ModelList>;
