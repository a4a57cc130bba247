import { z } from 'zod';
import { BatchEndpoint } from './openai-batch.js';

/** How a job's rows are retried (`shared/batch/retry.ts`): attempts per row, and the back-off between them. */
export const RowRetry = z.object({
  maxAttempts: z.number().int().min(1).max(10).default(4),
  baseMs: z.number().int().min(10).max(60_000).default(500),
  maxMs: z.number().int().min(10).max(600_000).default(30_000),
});
export type RowRetry = z.infer<typeof RowRetry>;

/**
 * What a job does (docs/jobs.md). `openai-batch`: the lines of a JSONL file of the Files API, each a request to
 * `endpoint` (the OpenAI Batch API's batches are these). Its runner sends at most `concurrency` rows at once and
 * retries a row by `retry`; a runner that ends before its rows are done starts again from the checkpoint, at most
 * `maxAttempts` runners in all. `backend`: where its runner runs (docs/jobs.md, "Backends").
 */
export const JobSpec = z.object({
  kind: z.literal('openai-batch'),
  endpoint: BatchEndpoint,
  inputFileId: z.string().min(1).max(64),
  backend: z.enum(['local']).default('local'),
  concurrency: z.number().int().min(1).max(256).default(16),
  retry: RowRetry.default(RowRetry.parse({})),
  maxAttempts: z.number().int().min(1).max(20).default(5),
});
export type JobSpec = z.infer<typeof JobSpec>;

/** Row results a runner sends in one checkpoint, at most. */
export const MAX_CHECKPOINT_ROWS = 1_000;
/** An output line of one row, at most (its answer inside): a larger answer is the row's error instead. */
export const MAX_RESULT_LINE_BYTES = 1024 * 1024;
/** A checkpoint's body, at most: a runner sends its results in several when they are larger. */
export const MAX_CHECKPOINT_BYTES = 16 * 1024 * 1024;

/** What a job's runner is told when it starts or asks again: its job, its attempt, the rows already done. */
export const RunnerJob = z.object({
  id: z.string(),
  attempt: z.number().int(),
  spec: JobSpec,
  done: z.array(z.tuple([z.number().int(), z.number().int()])),
  /** Asked to stop: the runner sends what it finished and ends. */
  cancel: z.boolean(),
});
export type RunnerJob = z.infer<typeof RunnerJob>;

/** One row's result as the runner sends it: its output line (`shared/batch/output.ts`), and whether it succeeded. */
export const RowResult = z.object({
  row: z.number().int().min(0),
  ok: z.boolean(),
  line: z.string().min(2).max(MAX_RESULT_LINE_BYTES),
});
export type RowResult = z.infer<typeof RowResult>;

export const RunnerCheckpoint = z.object({
  attempt: z.number().int().min(0),
  results: z.array(RowResult).min(1).max(MAX_CHECKPOINT_ROWS),
});
export type RunnerCheckpoint = z.infer<typeof RunnerCheckpoint>;

export const RunnerCheckpointAnswer = z.object({
  /** Rows newly done; a row already done (sent again after a restart) is dropped, never counted twice. */
  accepted: z.number().int(),
  duplicates: z.number().int(),
  cancel: z.boolean(),
});
export type RunnerCheckpointAnswer = z.infer<typeof RunnerCheckpointAnswer>;

/** The runner read its input to the end: how many rows it holds. */
export const RunnerDone = z.object({ attempt: z.number().int().min(0), totalRows: z.number().int().min(0) });
export type RunnerDone = z.infer<typeof RunnerDone>;
