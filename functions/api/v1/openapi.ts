import type { OpenAPIHono } from '@hono/zod-openapi';
import { z } from 'zod';
import { ROLE_EXTENSION } from '../http/guarded.js';
import { ChatCompletionRequest, CompletionRequest, EmbeddingRequest, ModelList, OpenAIErrorEnvelope } from '../../../shared/contracts/openai.js';
import { FileDeleted, FileList, FileListQuery, FileObject, UploadPurpose } from '../../../shared/contracts/openai-files.js';
import { BatchCreateRequest, BatchList, BatchListQuery, BatchObject } from '../../../shared/contracts/openai-batch.js';
import { RunnerCheckpoint, RunnerCheckpointAnswer, RunnerDone, RunnerJob } from '../../../shared/batch/job.js';

/** What every `/v1` operation shares: its own server, the bearer token, and the role every token has (inference, the lowest). */
const V1 = { servers: [{ url: '/' }], security: [{ bearer: [] }], [ROLE_EXTENSION]: 'inference' };

/** An answer in OpenAI's error envelope. */
const openAIError = (description: string) => ({ description, content: { 'application/json': { schema: OpenAIErrorEnvelope } } });

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
    ).map(([status, description]) => [status, openAIError(description)]),
  );
  const relayed = z.object({}).passthrough().describe("The runtime's OpenAI-compatible answer, relayed byte for byte");
  const generation = (path: string, summary: string, schema: z.ZodType, streams: boolean) =>
    registry.registerPath({
      method: 'post',
      path,
      ...V1,
      summary,
      tags: ['inference'],
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
    ...V1,
    summary: 'The models this token may call',
    tags: ['inference'],
    responses: { 200: { description: 'Models', content: { 'application/json': { schema: ModelList } } }, 401: errors[401]! },
  });
  generation('/v1/chat/completions', 'Chat completion, relayed to a replica of the named model', ChatCompletionRequest, true);
  generation('/v1/completions', 'Text completion, relayed to a replica of the named model', CompletionRequest, true);
  generation('/v1/embeddings', 'Embeddings, relayed to a replica of the named model', EmbeddingRequest, false);
  registerFilesPaths(registry);
  registerBatchPaths(registry);
}

/** The Files API (docs/files.md), in the same document and under the same server as the rest of `/v1`. */
function registerFilesPaths(registry: OpenAPIHono['openAPIRegistry']): void {
  const json = (description: string, schema: z.ZodType) => ({ description, content: { 'application/json': { schema } } });
  const fileErrors = {
    400: openAIError('Invalid request: a malformed form, a missing or refused field, an empty file'),
    401: openAIError('Missing or invalid API key'),
    404: openAIError('No file of that id in the workspace'),
    409: openAIError('The control plane has no artifact store to keep files in: `no_artifact_store`'),
  };
  const params = z.object({ file_id: z.string() });
  const operation = { ...V1, tags: ['files'] };
  registry.registerPath({
    ...operation,
    method: 'post',
    path: '/v1/files',
    summary: 'Uploads a file, streamed to the artifact store',
    request: {
      body: {
        content: {
          'multipart/form-data': { schema: z.object({ file: z.string().describe("The file's bytes, sent with its file name"), purpose: UploadPurpose }) },
        },
        required: true,
      },
    },
    responses: { 200: json('The file', FileObject), ...fileErrors, 413: openAIError('The file is over `filesMaxBytes`') },
  });
  registry.registerPath({
    ...operation,
    method: 'get',
    path: '/v1/files',
    summary: "The workspace's files, a page at a time",
    request: { query: FileListQuery },
    responses: { 200: json('A page of files', FileList), ...fileErrors },
  });
  registry.registerPath({
    ...operation,
    method: 'get',
    path: '/v1/files/{file_id}',
    summary: 'A file',
    request: { params },
    responses: { 200: json('The file', FileObject), ...fileErrors },
  });
  registry.registerPath({
    ...operation,
    method: 'get',
    path: '/v1/files/{file_id}/content',
    summary: "A file's bytes, streamed",
    request: { params },
    responses: { 200: { description: "The file's bytes", content: { 'application/octet-stream': { schema: z.string() } } }, ...fileErrors },
  });
  registry.registerPath({
    ...operation,
    method: 'delete',
    path: '/v1/files/{file_id}',
    summary: 'Deletes a file and its bytes',
    request: { params },
    responses: { 200: json('The file is deleted', FileDeleted), ...fileErrors },
  });
}

/** The Batch API and the runner's routes (docs/jobs.md), as the Files API: same document, same server. */
function registerBatchPaths(registry: OpenAPIHono['openAPIRegistry']): void {
  const json = (description: string, schema: z.ZodType) => ({ description, content: { 'application/json': { schema } } });
  const errors = {
    400: openAIError('Invalid request: a malformed body, a refused field, an input file not of purpose `batch`'),
    401: openAIError('Missing or invalid API key'),
    404: openAIError('No batch (or input file) of that id in the workspace'),
  };
  const batch = { ...V1, tags: ['batches'] };
  const params = z.object({ batch_id: z.string() });
  registry.registerPath({
    ...batch,
    method: 'post',
    path: '/v1/batches',
    summary: 'Creates a batch: a job over a JSONL file of purpose `batch`, one request a line, to one endpoint',
    request: { body: { content: { 'application/json': { schema: BatchCreateRequest } }, required: true } },
    responses: { 200: json('The batch', BatchObject), ...errors, 413: openAIError('The body is over 64 KiB') },
  });
  registry.registerPath({
    ...batch,
    method: 'get',
    path: '/v1/batches',
    summary: "The workspace's batches, newest first, a page at a time",
    request: { query: BatchListQuery },
    responses: { 200: json('A page of batches', BatchList), ...errors },
  });
  registry.registerPath({
    ...batch,
    method: 'get',
    path: '/v1/batches/{batch_id}',
    summary: 'A batch: its status, request counts and output files',
    request: { params },
    responses: { 200: json('The batch', BatchObject), ...errors },
  });
  registry.registerPath({
    ...batch,
    method: 'post',
    path: '/v1/batches/{batch_id}/cancel',
    summary: 'Cancels a batch: it stops and keeps the rows it finished',
    request: { params },
    responses: { 200: json('The batch', BatchObject), ...errors, 409: openAIError('The batch has ended, or is finalizing') },
  });
  const runner = { ...V1, tags: ['job runners'] };
  const job = z.object({ job_id: z.string() });
  const mine = {
    401: openAIError('Missing or invalid API key'),
    404: openAIError("No job runs with this token: only the token of the job's current runner reaches these routes"),
  };
  registry.registerPath({
    ...runner,
    method: 'get',
    path: '/v1/jobs/{job_id}/runner',
    summary: "A job's runner reads its job: spec, attempt, rows done, whether it is asked to stop",
    request: { params: job },
    responses: { 200: json('The job', RunnerJob), ...mine },
  });
  registry.registerPath({
    ...runner,
    method: 'post',
    path: '/v1/jobs/{job_id}/runner/checkpoints',
    summary: "A job's runner checkpoints the results of some rows",
    request: { params: job, body: { content: { 'application/json': { schema: RunnerCheckpoint } }, required: true } },
    responses: {
      200: json('Kept', RunnerCheckpointAnswer),
      400: openAIError('A malformed checkpoint'),
      409: openAIError("Another attempt than the job's"),
      413: openAIError('Over 16 MiB'),
      ...mine,
    },
  });
  registry.registerPath({
    ...runner,
    method: 'post',
    path: '/v1/jobs/{job_id}/runner/done',
    summary: "A job's runner read its whole input",
    request: { params: job, body: { content: { 'application/json': { schema: RunnerDone } }, required: true } },
    responses: {
      200: json('Recorded', z.object({ totalRows: z.number().int(), finished: z.number().int() })),
      400: openAIError('A malformed body'),
      409: openAIError("Another attempt than the job's"),
      ...mine,
    },
  });
}
