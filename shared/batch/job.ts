import { z } from 'zod';
import { BatchEndpoint } from '../contracts/openai-batch.js';
import { BatchJobRows, BatchJobRowsInput, JOB_KIND_URLS } from './job-rows.js';
import { JobBackend } from '../contracts/job-backend.js';
import { ParamValue } from '../contracts/run.js';
import { ParamName, TemplateName } from '../contracts/runtime-template.js';
import { SwarmName } from '../contracts/swarm.js';

/** How a job's rows are retried (`shared/batch/retry.ts`): attempts per row, and the back-off between them. */
export const RowRetry = z.object({
  maxAttempts: z.number().int().min(1).max(10).default(4),
  baseMs: z.number().int().min(10).max(60_000).default(500),
  maxMs: z.number().int().min(10).max(600_000).default(30_000),
});
export type RowRetry = z.infer<typeof RowRetry>;

/** Where a job's runner runs (shared/contracts/job-backend.ts). */
export { JobBackend };

/** What every job has, whatever it does: where its runner runs, how many rows at once, how rows and runners retry. */
const JobRunning = {
  backend: JobBackend.default('local'),
  concurrency: z.number().int().min(1).max(256).default(16),
  retry: RowRetry.default(RowRetry.parse({})),
  maxAttempts: z.number().int().min(1).max(20).default(5),
};

/**
 * A job that is the user's own process (docs/jobs.md, "Commands"): a registered job template with its parameters,
 * run on the `agent` backend only (the node's local policy decides whether it runs it), what it reserves, and the
 * model it is told of (MODEL). It is given ENDPOINT, MODEL and a token and calls the endpoint as any client; it
 * completes when it exits 0.
 */
const JobCommand = z.object({
  template: TemplateName,
  params: z
    .record(ParamName, ParamValue)
    .refine((params) => Object.keys(params).length <= 64, 'at most 64 params')
    .default({}),
  model: z.string().max(256).default(''),
  resources: z
    .object({
      gpus: z.number().int().min(0).max(64).default(0),
      cores: z.number().int().min(0).max(1024).default(1),
      memoryMiB: z
        .number()
        .int()
        .min(0)
        .max(2 ** 31 - 1)
        .default(512),
    })
    .default({ gpus: 0, cores: 1, memoryMiB: 512 }),
});

/**
 * What a job does (docs/jobs.md). `openai-batch`: the lines of a JSONL file of the Files API, each a request to
 * `endpoint` (the OpenAI Batch API's batches are these). `rows`: a built-in chat, completion or embedding job over
 * the rows of a JSONL or Parquet file (`BatchJobRows`: its kind, its model, defaults), its output in the same format.
 * Its runner sends at most `concurrency` rows at once and retries a row by `retry`; a runner that ends before its
 * rows are done starts again from the checkpoint, at most `maxAttempts` runners in all. `command`: the user's own
 * process (`JobCommand`), started again while it fails, `maxAttempts` in all. `backend`: where its runner runs
 * (docs/jobs.md, "Backends").
 */
export const JobSpec = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('openai-batch'), endpoint: BatchEndpoint, inputFileId: z.string().min(1).max(64), ...JobRunning }),
  z.object({ kind: z.literal('rows'), rows: BatchJobRows, inputFileId: z.string().min(1).max(64), format: z.enum(['jsonl', 'parquet']), ...JobRunning }),
  z.object({ kind: z.literal('command'), command: JobCommand, ...JobRunning }),
]);
export type JobSpec = z.infer<typeof JobSpec>;

/** The endpoint a job's rows go to; null for a command, which calls what it will. */
export const jobEndpoint = (spec: JobSpec): BatchEndpoint | null =>
  spec.kind === 'openai-batch' ? spec.endpoint : spec.kind === 'rows' ? JOB_KIND_URLS[spec.rows.kind] : null;

/** The model a job's process is given (MODEL): its rows', its command's; empty for a batch, whose lines name theirs. */
export const jobModel = (spec: JobSpec): string => (spec.kind === 'rows' ? spec.rows.model : spec.kind === 'command' ? spec.command.model : '');

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

/**
 * A built-in job as the management API takes it (`POST /api/v1/jobs`): its rows, its input file and its format.
 * `swarm`: the swarm it is submitted to (docs/jobs.md, "Swarms"); its rows' model, its backend, concurrency and
 * attempts default to the swarm's. Without a swarm the model is required, and the rest defaults as `JobSpec`'s.
 */
export const JobSubmission = z
  .object({
    rows: BatchJobRowsInput,
    inputFileId: z.string().min(1).max(64),
    format: z.enum(['jsonl', 'parquet']).default('jsonl'),
    swarm: SwarmName.optional(),
    backend: JobBackend.optional(),
    concurrency: JobRunning.concurrency.unwrap().optional(),
    retry: JobRunning.retry,
    maxAttempts: JobRunning.maxAttempts.unwrap().optional(),
  })
  .refine((submission) => submission.rows.model !== undefined || submission.swarm !== undefined, {
    message: 'a job names its model, unless it is submitted to a swarm',
    path: ['rows', 'model'],
  });
export type JobSubmission = z.infer<typeof JobSubmission>;

/**
 * A command job as the management API takes it (`POST /api/v1/jobs/commands`): its template, parameters and what it
 * reserves; its model (MODEL) defaults to its swarm's. It runs on the `agent` backend.
 */
export const CommandSubmission = z.object({
  command: JobCommand.extend({ model: z.string().max(256).optional() }),
  swarm: SwarmName.optional(),
  maxAttempts: JobRunning.maxAttempts.unwrap().optional(),
});
export type CommandSubmission = z.infer<typeof CommandSubmission>;

/** A job as the management API shows it: what it does, where it stands, its progress and its output. */
export const JobView = z.object({
  id: z.string(),
  kind: z.enum(['openai-batch', 'rows', 'command']),
  state: z.enum(['pending', 'running', 'finalizing', 'completed', 'failed', 'cancelling', 'cancelled', 'expired']),
  spec: JobSpec,
  attempt: z.number().int(),
  /** Rows in the input (null until its runner read it whole), rows answered 2xx, the others. */
  rows: z.object({ total: z.number().int().nullable(), succeeded: z.number().int(), failed: z.number().int() }),
  /** Rows per second over the last minute, and the time left at that rate; null while unknown. */
  rate: z.number().nullable(),
  etaMs: z.number().int().nullable(),
  outputFileId: z.string().nullable(),
  errorFileId: z.string().nullable(),
  reason: z.string().nullable(),
  createdAt: z.string(),
  startedAt: z.string().nullable(),
  finishedAt: z.string().nullable(),
  expiresAt: z.string().nullable(),
});
export type JobView = z.infer<typeof JobView>;

/**
 * The variables a job's process is given (docs/jobs.md, "The runner", "Commands"), wherever it runs: where the
 * control plane is, its job, the OpenAI-style endpoint and model, and its token under both names once it has one (a
 * backend that hands it over at the start; on a node the agent asks for it when it starts the process).
 */
export function jobProcessEnv(input: { url: string; jobId: string; model: string; token: string | null }): Record<string, string> {
  const base = input.url.replace(/\/$/, '');
  const token: Record<string, string> = input.token === null ? {} : { LUNANEXA_JOB_TOKEN: input.token, OPENAI_API_KEY: input.token };
  return { LUNANEXA_URL: base, LUNANEXA_JOB_ID: input.jobId, ENDPOINT: `${base}/v1`, OPENAI_BASE_URL: `${base}/v1`, MODEL: input.model, ...token };
}
