import type { OpenAPIHono } from '@hono/zod-openapi';
import { z } from 'zod';
import { ROLE_EXTENSION } from '../http/guarded.js';
import { ChatCompletionRequest, CompletionRequest, EmbeddingRequest, ModelList, OpenAIErrorEnvelope } from '../../../shared/contracts/openai.js';

/**
 * The `/v1` surface in the management API's OpenAPI document. `/v1` is plain Hono (its hot path avoids the
 * OpenAPI layer), so its operations are registered here from the same contracts its handlers parse with. Their
 * keys are absolute (`/v1/...`) with a path-level server of `/`, so they never collide with `/api/v1` paths.
 */
export function registerInferencePaths(registry: OpenAPIHono['openAPIRegistry']): void {
  const errors = Object.fromEntries(
    (
      [
        [400, 'Invalid request (OpenAI error envelope)'],
        [401, 'Missing or invalid API key'],
        [404, 'Unknown model, or a model the token may not call'],
        [413, 'Body too large'],
        [429, "Over the token's rate limit or the deployment's queue; see Retry-After"],
        [502, 'The runtime failed or sent an answer that cannot be relayed'],
        [503, 'No replica can take the request before its deadline'],
        [504, 'The deadline passed'],
      ] as const
    ).map(([status, description]) => [status, { description, content: { 'application/json': { schema: OpenAIErrorEnvelope } } }]),
  );
  const relayed = z.object({}).passthrough().describe("The runtime's OpenAI-compatible answer, relayed byte for byte");
  const security = [{ bearer: [] }];
  // Every token may call /v1 (inference is the lowest role); allow-lists and rate limits apply per token.
  const role = { [ROLE_EXTENSION]: 'inference' };
  const servers = [{ url: '/' }];
  const generation = (path: string, summary: string, schema: z.ZodType, streams: boolean) =>
    registry.registerPath({
      method: 'post',
      path,
      servers,
      summary,
      tags: ['inference'],
      security,
      ...role,
      request: {
        headers: z.object({
          'idempotency-key': z.string().min(1).max(256).optional(),
          'x-lunanexa-deadline': z.string().optional().describe('ISO-8601 time or epoch milliseconds'),
        }),
        body: { content: { 'application/json': { schema } }, required: true },
      },
      responses: {
        200: {
          description: streams ? 'The answer; server-sent events when `stream` is true' : 'The answer',
          content: streams
            ? { 'application/json': { schema: relayed }, 'text/event-stream': { schema: z.string() } }
            : { 'application/json': { schema: relayed } },
        },
        ...errors,
      },
    });
  registry.registerPath({
    method: 'get',
    path: '/v1/models',
    servers,
    summary: 'The models this token may call',
    tags: ['inference'],
    security,
    ...role,
    responses: { 200: { description: 'Models', content: { 'application/json': { schema: ModelList } } }, 401: errors[401]! },
  });
  generation('/v1/chat/completions', 'Chat completion, relayed to a replica of the named model', ChatCompletionRequest, true);
  generation('/v1/completions', 'Text completion, relayed to a replica of the named model', CompletionRequest, true);
  generation('/v1/embeddings', 'Embeddings, relayed to a replica of the named model', EmbeddingRequest, false);
}
