import { and, eq, isNull, lt, or, sql } from 'drizzle-orm';
import { jobs } from '../store/schema/index.js';
import { JsonlSplitter } from '../../shared/batch/jsonl.js';
import type { BatchOutputLine } from '../../shared/batch/output.js';
import { OUTPUT_PARQUET_COLUMNS, outputParquetRow, writeParquetRows } from '../../shared/batch/parquet.js';
import { RowResult } from '../../shared/batch/job.js';
import type { ObjectStore } from '../kernel/ports/object-store.js';
import { mergeByRow } from '../core/jobs/merge.js';
import type { JobOutcome } from '../core/jobs/states.js';
import { createFile, fileStore, type FilesCtx } from './files.js';
import { dropJobParts, jobPartKey, jobPartsOf } from './job-checkpoints.js';
import { instanceAlive } from './instances.js';
import type { ServicePorts } from './service-context.js';
import type { JobRow } from './job-runners.js';

/** How many parts one merge reads at once: more are merged in rounds, through intermediate parts. */
const FAN_IN = 64;
/** How long a finalizing instance holds a job before another may take it over (its host died mid-way). */
const FINALIZE_LEASE_MS = 10 * 60_000;

type FinalizeCtx = FilesCtx & Pick<ServicePorts, 'config'>;

/** How long a job's output files are kept: its data class's retention, taken when it was submitted; null, until deleted. */
const keptFor = (job: JobRow): number | null => (job.filesDays === null ? null : job.filesDays * 86_400);

/** The results of one part, in its (row) order. */
async function* partResults(store: ObjectStore, key: string): AsyncGenerator<RowResult> {
  const opened = await store.openObject(key);
  if (!opened) throw new Error(`a part of the job's results is missing from the artifact store: ${key}`);
  if (opened.size === 0) return void (await opened.close());
  const splitter = new JsonlSplitter(Number.MAX_SAFE_INTEGER);
  const reader = opened.stream(0, opened.size - 1).getReader();
  for (;;) {
    const { done, value } = await reader.read();
    for (const line of done ? splitter.end() : splitter.push(value)) {
      if ('error' in line) throw new Error(`a part of the job's results is unreadable: ${line.error.message}`);
      yield RowResult.parse(JSON.parse(line.text));
    }
    if (done) return;
  }
}

/** Text lines as a byte stream, pulled as it is read. */
function linesStream(lines: AsyncGenerator<string>): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  return new ReadableStream({
    async pull(controller) {
      const next = await lines.next();
      if (next.done) controller.close();
      else controller.enqueue(encoder.encode(`${next.value}\n`));
    },
    async cancel() {
      await lines.return(undefined);
    },
  });
}

async function* asLines(results: AsyncGenerator<RowResult>): AsyncGenerator<string> {
  for await (const result of results) yield JSON.stringify(result);
}

/**
 * The job's parts as at most `FAN_IN` sorted keys: rounds of merges write intermediate parts (after the last `seq`),
 * deleting what they merged, so that the final merge opens few objects however many checkpoints there were.
 */
async function fewParts(store: ObjectStore, job: JobRow, keys: string[]): Promise<string[]> {
  let seq = job.parts;
  let level = keys;
  while (level.length > FAN_IN) {
    const next: string[] = [];
    for (let i = 0; i < level.length; i += FAN_IN) {
      const group = level.slice(i, i + FAN_IN);
      const key = jobPartKey(job, seq++);
      const merged = mergeByRow(group.map((k) => partResults(store, k)));
      await store.putObject(key, linesStream(asLines(merged)), { maxBytes: Number.MAX_SAFE_INTEGER });
      for (const k of group) await store.deleteObject(k);
      next.push(key);
    }
    level = next;
  }
  return level;
}

/** The output lines of the results `keep` takes, merged in row order, as a file of the job's workspace. */
async function outputFile(ctx: FinalizeCtx, job: JobRow, keys: readonly string[], name: string, keep: (r: RowResult) => boolean): Promise<string> {
  const merged = mergeByRow(keys.map((k) => partResults(ctx.objects!, k)));
  async function* lines() {
    for await (const result of merged) if (keep(result)) yield result.line;
  }
  const file = await createFile({
    ctx,
    input: { workspaceId: job.workspaceId, filename: `${job.id}_${name}.jsonl`, purpose: 'batch_output', body: linesStream(lines()), expiresInS: keptFor(job) },
  });
  return file.id;
}

/**
 * Every row's output line, merged in row order, as a Parquet file (`OUTPUT_PARQUET_COLUMNS`): the output of a job
 * over Parquet rows is Parquet. The writer takes its rows whole: the file is built in memory.
 */
async function parquetOutputFile(ctx: FinalizeCtx, job: JobRow, keys: readonly string[]): Promise<string> {
  const rows = [];
  for await (const result of mergeByRow(keys.map((k) => partResults(ctx.objects!, k)))) rows.push(outputParquetRow(JSON.parse(result.line) as BatchOutputLine));
  const body = new Blob([new Uint8Array(writeParquetRows(rows, OUTPUT_PARQUET_COLUMNS))]).stream();
  const file = await createFile({
    ctx,
    input: { workspaceId: job.workspaceId, filename: `${job.id}_output.parquet`, purpose: 'batch_output', body, expiresInS: keptFor(job) },
  });
  return file.id;
}

/**
 * Finalizes a job that is `finalizing` and that no live instance is finalizing: takes it over (a lease, so that two
 * instances never write its output twice), merges its parts in row order into its output file (the rows that got a
 * 2xx answer) and its error file (the others), records them and its outcome, and drops its parts. False when there
 * was nothing to take. The output of a job that stopped early holds every row it finished.
 */
export async function finalizeJob({ ctx, input }: { ctx: FinalizeCtx; input: { jobId: string; instanceId: string } }): Promise<boolean> {
  const store = fileStore(ctx);
  const [job] = await ctx.db
    .update(jobs)
    .set({ leaseInstanceId: input.instanceId, leaseExpiresAt: sql`now() + make_interval(secs => ${FINALIZE_LEASE_MS / 1000})` })
    .where(
      and(
        eq(jobs.id, input.jobId),
        eq(jobs.state, 'finalizing'),
        or(isNull(jobs.leaseInstanceId), lt(jobs.leaseExpiresAt, sql`now()`), sql`not ${instanceAlive(jobs.leaseInstanceId)}`),
      ),
    )
    .returning();
  if (!job) return false;
  const keys = await fewParts(
    store,
    job,
    (await jobPartsOf(ctx, job.id)).map((p) => p.objectKey),
  );
  // Each only when it has a line: the Files API holds no empty file, and OpenAI leaves such an id unset too. A
  // built-in job's output holds every row, a result or an error, in its input's format; a command writes none here.
  const { spec } = job;
  let outputFileId: string | null = null;
  let errorFileId: string | null = null;
  if (spec.kind === 'rows') {
    if (job.doneRows + job.failedRows > 0)
      outputFileId = spec.format === 'parquet' ? await parquetOutputFile(ctx, job, keys) : await outputFile(ctx, job, keys, 'output', () => true);
  } else if (spec.kind === 'openai-batch') {
    if (job.doneRows > 0) outputFileId = await outputFile(ctx, job, keys, 'output', (r) => r.ok);
    if (job.failedRows > 0) errorFileId = await outputFile(ctx, job, keys, 'error', (r) => !r.ok);
  }
  const outcome = (job.outcome ?? 'completed') as JobOutcome;
  await ctx.db
    .update(jobs)
    .set({ state: outcome, outputFileId, errorFileId, finishedAt: sql`now()`, leaseInstanceId: null, leaseExpiresAt: null })
    .where(and(eq(jobs.id, job.id), eq(jobs.state, 'finalizing'), eq(jobs.leaseInstanceId, input.instanceId)));
  await dropJobParts(ctx, job.id);
  // Intermediate parts of the merge rounds have no rows: they go with the keys merged last.
  for (const key of keys) await store.deleteObject(key);
  return true;
}
