import { z } from 'zod';
import { cursorPage } from './openai-page.js';

/** The endpoints a batch may target: those of the `/v1` surface that take one request and give one answer. */
export const BatchEndpoint = z.enum(['/v1/chat/completions', '/v1/completions', '/v1/embeddings']);
export type BatchEndpoint = z.infer<typeof BatchEndpoint>;

/** OpenAI's metadata: at most 16 pairs, keys of 64 characters, values of 512. */
const Metadata = z
  .record(z.string().min(1).max(64), z.string().max(512))
  .refine((m) => Object.keys(m).length <= 16, 'at most 16 metadata pairs')
  .nullable();

/** `POST /v1/batches` as OpenAI's Batch API takes it. */
export const BatchCreateRequest = z.object({
  input_file_id: z.string().min(1).max(64),
  endpoint: BatchEndpoint,
  completion_window: z.literal('24h'),
  metadata: Metadata.optional(),
});
export type BatchCreateRequest = z.infer<typeof BatchCreateRequest>;

const BatchStatusName = z.enum(['validating', 'failed', 'in_progress', 'finalizing', 'completed', 'expired', 'cancelling', 'cancelled']);

/** A batch as OpenAI's Batch API answers it; times in Unix seconds, absent until they happen. */
export const BatchObject = z.object({
  id: z.string(),
  object: z.literal('batch'),
  endpoint: z.string(),
  errors: z
    .object({
      object: z.literal('list'),
      data: z.array(z.object({ code: z.string(), message: z.string(), line: z.number().int().nullable(), param: z.string().nullable() })),
    })
    .nullable(),
  input_file_id: z.string(),
  completion_window: z.string(),
  status: BatchStatusName,
  output_file_id: z.string().nullable(),
  error_file_id: z.string().nullable(),
  created_at: z.number().int(),
  in_progress_at: z.number().int().nullable(),
  expires_at: z.number().int().nullable(),
  finalizing_at: z.number().int().nullable(),
  completed_at: z.number().int().nullable(),
  failed_at: z.number().int().nullable(),
  expired_at: z.number().int().nullable(),
  cancelling_at: z.number().int().nullable(),
  cancelled_at: z.number().int().nullable(),
  request_counts: z.object({ total: z.number().int(), completed: z.number().int(), failed: z.number().int() }),
  metadata: z.record(z.string(), z.string()).nullable(),
});
export type BatchObject = z.infer<typeof BatchObject>;

/** `GET /v1/batches`'s query: OpenAI's cursor page, newest first. */
export const BatchListQuery = z.object({
  limit: z.coerce.number().int().min(1).max(100).default(20),
  after: z.string().min(1).max(64).optional(),
});

/** A page of `GET /v1/batches`. */
export const BatchList = cursorPage(BatchObject);
export type BatchList = z.infer<typeof BatchList>;
