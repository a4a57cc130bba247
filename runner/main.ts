import { z } from 'zod';
import {
  MAX_CHECKPOINT_BYTES,
  MAX_CHECKPOINT_ROWS,
  MAX_RESULT_LINE_BYTES,
  RunnerCheckpointAnswer,
  RunnerJob,
  type JobSpec,
  type RowResult,
} from '../shared/batch/job.js';
import { batchRequestId, errorLine, isErrorLine, responseLine, type BatchOutputLine } from '../shared/batch/output.js';
import { parseRequestLine } from '../shared/batch/request-line.js';
import { rowRequest } from '../shared/batch/job-rows.js';
import { PendingRows } from '../shared/batch/pending-rows.js';
import type { RowError } from '../shared/batch/row-error.js';
import { count } from '../shared/batch/checkpoint.js';
import { retryDelay, type RowFailure } from '../shared/batch/retry.js';

/**
 * A job's runner (docs/jobs.md, "The runner"): a process of its own, wherever a backend starts it, that talks to the
 * control plane over HTTP only: it reads its job and checkpoint, streams its input file, sends each row not done yet
 * to the row's endpoint (at most `concurrency` at once, retried by the job's policy), and checkpoints results as
 * they come. It holds at most `concurrency` rows and one checkpoint's results: a job of any size runs in bounded
 * memory. Killed at any point, the next attempt starts from what the control plane acknowledged.
 */
const Env = z.object({
  LUNANEXA_URL: z.string().url(),
  LUNANEXA_JOB_ID: z.string().min(1),
  LUNANEXA_JOB_TOKEN: z.string().min(1),
});

/** What a runner works through: a batch's request lines or a built-in job's rows. */
type RowsSpec = Exclude<JobSpec, { kind: 'command' }>;

/** A row of the input as the request it becomes, or why none (with its `custom_id` when it has one). */
type InputRow = { index: number } & (
  | { ok: true; customId: string; url: string; body: Record<string, unknown> }
  | { ok: false; customId: string | null; error: RowError }
);

/**
 * Results are sent when this many wait, or this many bytes of them, or this long after the first of them finished:
 * what a killed runner loses (answers not yet acknowledged, sent again by the next attempt) stays small.
 */
const FLUSH_ROWS = Math.min(200, MAX_CHECKPOINT_ROWS);
const FLUSH_BYTES = MAX_CHECKPOINT_BYTES / 2 - MAX_RESULT_LINE_BYTES;
const FLUSH_MS = 500;

class Runner {
  private readonly pending: RowResult[] = [];
  private pendingBytes = 0;
  private flushTimer: ReturnType<typeof setTimeout> | null = null;
  private flushing: Promise<void> = Promise.resolve();
  private cancelled = false;
  /** Why a checkpoint was refused: the runner stops reading and ends with it. */
  private failed: unknown = null;
  private readonly inFlight = new Set<Promise<void>>();
  /** Rows this attempt sent to their endpoint (its log says so; never what they held). */
  private sent = 0;

  constructor(
    private readonly env: z.infer<typeof Env>,
    private readonly job: RunnerJob & { spec: RowsSpec },
  ) {}

  private get base() {
    return this.env.LUNANEXA_URL.replace(/\/$/, '');
  }

  private headers(extra: Record<string, string> = {}) {
    return { authorization: `Bearer ${this.env.LUNANEXA_JOB_TOKEN}`, ...extra };
  }

  async run(): Promise<void> {
    const input = await fetch(`${this.base}/v1/files/${encodeURIComponent(this.job.spec.inputFileId)}/content`, { headers: this.headers() });
    if (!input.ok || !input.body) throw new Error(`reading the input file: HTTP ${input.status}`);
    const pending = new PendingRows(this.job.done);
    for await (const row of this.rows(input, pending)) {
      if (this.failed !== null) throw this.failed;
      if (this.cancelled) break;
      // Bounded: a row starts only once one of the `concurrency` in flight has ended.
      while (this.inFlight.size >= this.job.spec.concurrency) await Promise.race(this.inFlight);
      const task = this.row(row).finally(() => this.inFlight.delete(task));
      this.inFlight.add(task);
    }
    await Promise.all(this.inFlight);
    await this.flush();
    if (this.failed !== null) throw this.failed;
    if (this.cancelled) return say(`cancelled after ${this.sent} rows sent by this attempt`);
    const rows = pending.read;
    await this.post('done', { attempt: this.job.attempt, totalRows: rows });
    say(`done: ${rows} rows in the input, ${this.sent} sent by this attempt`);
  }

  /** What a line of the input asks: an OpenAI batch's request line, or a built-in job's row. */
  private request(index: number, text: string): InputRow {
    const { spec } = this.job;
    if (spec.kind === 'openai-batch') {
      const parsed = parseRequestLine(text, index, spec.endpoint);
      return parsed.ok ? { index, ok: true, customId: parsed.line.custom_id, url: parsed.line.url, body: parsed.line.body } : { index, ...parsed };
    }
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      return { index, ok: false, customId: null, error: { code: 'invalid_json', message: `row ${index}: the line is not JSON` } };
    }
    return { index, ...rowRequest(spec.rows.kind, spec.rows.model, spec.rows.defaults, value, index) };
  }

  /** The rows of the input not done yet, each as the request it becomes. */
  private async *rows(input: Response, pending: PendingRows): AsyncGenerator<InputRow> {
    const { spec } = this.job;
    if (spec.kind === 'rows' && spec.format === 'parquet') {
      for await (const { index, value } of pending.parquet(new Uint8Array(await input.arrayBuffer()))) {
        yield { index, ...rowRequest(spec.rows.kind, spec.rows.model, spec.rows.defaults, value, index) };
      }
      return;
    }
    if (!input.body) return;
    for await (const line of pending.jsonl(input.body)) {
      yield 'error' in line ? { index: line.index, ok: false, customId: null, error: line.error } : this.request(line.index, line.text);
    }
  }

  /** One row to its result: sent, retried by the job's policy, or refused as it stands. Never throws. */
  private async row(row: InputRow): Promise<void> {
    const id = batchRequestId(this.job.id, row.index);
    if (!row.ok) return this.result(row.index, errorLine({ id, customId: row.customId, error: row.error }));
    const { customId, url, body } = row;
    this.sent += 1;
    for (let attempt = 1; ; attempt += 1) {
      let failure: RowFailure;
      try {
        const answer = await fetch(`${this.base}${url}`, {
          method: 'POST',
          headers: this.headers({ 'content-type': 'application/json', 'x-lunanexa-lane': 'batch', 'x-request-id': id }),
          body: JSON.stringify({ ...body, stream: false }),
        });
        const text = await answer.text();
        const requestId = answer.headers.get('x-lunanexa-workload-id') ?? answer.headers.get('x-request-id') ?? id;
        failure = { status: answer.status, retryAfterS: Number(answer.headers.get('retry-after') ?? Number.NaN) };
        const decision = answer.ok ? { retry: false as const } : retryDelay({ ...failure, attempt, rowIndex: row.index, policy: this.job.spec.retry });
        if (!decision.retry) {
          return this.result(row.index, responseLine({ id, customId, statusCode: answer.status, requestId, body: parseJson(text) }));
        }
        await sleep(decision.delayMs);
      } catch (error) {
        failure = { networkError: true };
        const decision = retryDelay({ ...failure, attempt, rowIndex: row.index, policy: this.job.spec.retry });
        if (!decision.retry) {
          const message = `no answer after ${attempt} attempts: ${error instanceof Error ? error.message : String(error)}`;
          return this.result(row.index, errorLine({ id, customId, error: { code: 'no_answer', message } }));
        }
        await sleep(decision.delayMs);
      }
    }
  }

  private result(row: number, line: BatchOutputLine): void {
    let text = JSON.stringify(line);
    let ok = !isErrorLine(line);
    if (Buffer.byteLength(text) > MAX_RESULT_LINE_BYTES) {
      const error = { code: 'answer_too_large', message: `row ${row}: the answer is larger than ${MAX_RESULT_LINE_BYTES} bytes` };
      text = JSON.stringify(errorLine({ id: line.id, customId: line.custom_id, error }));
      ok = false;
    }
    this.pending.push({ row, ok, line: text });
    this.pendingBytes += Buffer.byteLength(text);
    if (this.pending.length >= FLUSH_ROWS || this.pendingBytes >= FLUSH_BYTES) void this.flush();
    else this.flushTimer ??= setTimeout(() => void this.flush(), FLUSH_MS);
  }

  /** Sends the results waiting, one checkpoint at a time, in the order they finished. */
  private flush(): Promise<void> {
    if (this.flushTimer) clearTimeout(this.flushTimer);
    this.flushTimer = null;
    const results = this.pending.splice(0);
    this.pendingBytes = 0;
    this.flushing = this.flushing.then(async () => {
      if (results.length === 0 || this.failed !== null) return;
      try {
        const answer = RunnerCheckpointAnswer.parse(await this.post('checkpoints', { attempt: this.job.attempt, results }));
        if (answer.cancel) this.cancelled = true;
      } catch (error) {
        this.failed = error;
      }
    });
    return this.flushing;
  }

  private async post(path: string, body: unknown): Promise<unknown> {
    const answer = await fetch(`${this.base}/v1/jobs/${this.job.id}/runner/${path}`, {
      method: 'POST',
      headers: this.headers({ 'content-type': 'application/json' }),
      body: JSON.stringify(body),
    });
    // The control plane refusing a checkpoint (a later attempt took over, the job ended) ends this runner.
    if (!answer.ok) throw new Error(`${path}: HTTP ${answer.status} ${await answer.text()}`);
    return await answer.json();
  }
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const say = (line: string) => void process.stderr.write(`runner: ${line}\n`);

async function main(): Promise<void> {
  const env = Env.parse(process.env);
  const answer = await fetch(`${env.LUNANEXA_URL.replace(/\/$/, '')}/v1/jobs/${env.LUNANEXA_JOB_ID}/runner`, {
    headers: { authorization: `Bearer ${env.LUNANEXA_JOB_TOKEN}` },
  });
  if (!answer.ok) throw new Error(`reading the job: HTTP ${answer.status} ${await answer.text()}`);
  const job = RunnerJob.parse(await answer.json());
  const { spec } = job;
  // A command job's process is its own template's: the runner is never started for one.
  if (spec.kind === 'command') throw new Error(`job ${job.id} is a command, not rows for a runner`);
  // What it does, never what its rows say: its log is read by operators (`lunanexa jobs logs`).
  say(`job ${job.id}, attempt ${job.attempt}: ${count(job.done)} rows done before it, ${job.spec.concurrency} at once`);
  if (job.cancel) return say('the job is cancelled: nothing to do');
  await new Runner(env, { ...job, spec }).run();
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    // The job's rows and answers are never printed: only why the runner stopped.
    process.stderr.write(`runner: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  },
);
