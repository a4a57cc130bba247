import { createWriteStream, openAsBlob } from 'node:fs';
import { basename, extname } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as NodeReadableStream } from 'node:stream/web';
import type { z } from 'zod';
import type { CommandSubmission, JobSubmission, JobView } from '../shared/batch/job.js';
import type { FileObject } from '../shared/contracts/openai-files.js';
import type { SwarmConfig, SwarmDown, SwarmView } from '../shared/contracts/swarm.js';
import { Http, LunaNexaError, sleep, type ConnectionOptions } from './http.js';
import { pollUntil, type Serving, type ServingState, type WaitOptions } from './serving.js';

/** A swarm's config as `PUT /api/v1/swarms/{name}` takes it, its defaults optional: `{name, deployment, jobs?}`. */
export type SwarmConfigInput = z.input<typeof SwarmConfig>;

/** A built-in job for a swarm: its rows (the model defaults to the swarm's) and limits; its input is a file of yours. */
export type SwarmJobInput = Omit<z.input<typeof JobSubmission>, 'inputFileId' | 'format' | 'swarm'>;

/** A command job for a swarm: `{command: {template, params?, model?, resources?}, maxAttempts?}`. */
export type SwarmCommandInput = Omit<z.input<typeof CommandSubmission>, 'swarm'>;

export interface SwarmOptions extends ConnectionOptions {
  /**
   * Whether leaving an `await using` scope (`[Symbol.asyncDispose]`) brings the swarm down: true for `Swarm.up`,
   * false for `Swarm.fromState` (a swarm that outlives the process that made it is read back to be used, not ended).
   */
  deleteOnExit?: boolean;
  /** `Swarm.up` waits until the swarm serves (default true). */
  wait?: boolean;
  /** How long `Swarm.up` waits for it to serve: default 10 minutes. */
  timeoutMs?: number;
  /** How often the SDK looks (a swarm coming up, a job running): default 1 s. */
  pollMs?: number;
}

/** The states a job ends in. */
const FINAL: ReadonlySet<JobView['state']> = new Set(['completed', 'failed', 'cancelled', 'expired']);

/** A job that ended otherwise than `completed`: its view says how (`state`, `reason`) and what it finished. */
export class JobError extends Error {
  constructor(readonly job: JobView) {
    super(`job ${job.id} ended ${job.state}${job.reason ? `: ${job.reason}` : ''}`);
    this.name = 'JobError';
  }
}

/**
 * A swarm of the control plane (docs/jobs.md, "Swarms"): a deployment and the jobs that use it, as one record that
 * outlives this process. `Swarm.up` creates or reconciles one and waits until it serves; `await using` brings it
 * down when the scope ends, however it ends, unless `deleteOnExit: false`; `Swarm.fromState` reads one back.
 */
export class Swarm implements Serving, AsyncDisposable {
  readonly #http: Http;
  readonly #pollMs: number;
  #view: SwarmView;
  /** Whether `[Symbol.asyncDispose]` brings it down. */
  deleteOnExit: boolean;

  private constructor(http: Http, view: SwarmView, options: SwarmOptions, deleteOnExit: boolean) {
    this.#http = http;
    this.#view = view;
    this.#pollMs = options.pollMs ?? 1_000;
    this.deleteOnExit = options.deleteOnExit ?? deleteOnExit;
  }

  /**
   * Creates the swarm, or reconciles it with `config` (`PUT /api/v1/swarms/{name}`), then waits until it serves
   * (a replica of its deployment ready) unless `wait: false`. A swarm that does not come up in `timeoutMs` is brought
   * down again (unless `deleteOnExit: false`) before the error is thrown: no `await using` holds it yet.
   */
  static async up(config: SwarmConfigInput, options: SwarmOptions = {}): Promise<Swarm> {
    const http = new Http(options);
    const view = await http.json<SwarmView>('PUT', swarmPath(config.name), { json: config });
    const swarm = new Swarm(http, view, options, true);
    if (options.wait === false) return swarm;
    try {
      await swarm.waitReady({ timeoutMs: options.timeoutMs });
    } catch (error) {
      if (swarm.deleteOnExit) await swarm.delete().catch(() => false);
      throw error;
    }
    return swarm;
  }

  /** The swarm `name` as the control plane keeps it (`GET /api/v1/swarms/{name}`); 404 is a `LunaNexaError`. */
  static async fromState(name: string, options: SwarmOptions = {}): Promise<Swarm> {
    const http = new Http(options);
    return new Swarm(http, await http.json<SwarmView>('GET', swarmPath(name)), options, false);
  }

  get name(): string {
    return this.#view.name;
  }

  /** The swarm as last read. */
  get view(): SwarmView {
    return this.#view;
  }

  /** Its OpenAI-compatible base URL (`.../v1`): for any OpenAI client, with `model` and a token. */
  get endpoint(): string {
    return this.#http.resolve(this.#view.endpoint);
  }

  /** The model its endpoint serves. */
  get model(): string {
    return this.#view.model;
  }

  /** Reads it again. */
  async refresh(): Promise<SwarmView> {
    this.#view = await this.#http.json<SwarmView>('GET', swarmPath(this.name));
    return this.#view;
  }

  async createOrUpdate(): Promise<ServingState> {
    this.#view = await this.#http.json<SwarmView>('PUT', swarmPath(this.name), { json: this.#view.config });
    return servingState(this.#view);
  }

  async status(): Promise<ServingState> {
    return servingState(await this.refresh());
  }

  async waitReady(options: WaitOptions = {}): Promise<ServingState> {
    return await pollUntil(
      () => this.status(),
      (s) => s.ready >= 1,
      (s) =>
        `swarm ${this.name} is ${s.status}, ${s.ready}/${s.desired} replicas ready${this.#view.reasons.length ? ` (${this.#view.reasons.join('; ')})` : ''}`,
      { intervalMs: this.#pollMs, ...options },
    );
  }

  /**
   * Submits a built-in job to the swarm: uploads `input` (a JSONL or Parquet file, by its extension unless `format`
   * says) through `POST /v1/files`, then submits the job over it (`POST /api/v1/jobs` with the swarm: its model and
   * job defaults apply). `wait` on the handle follows it and downloads its output to `output`.
   */
  async submitJob(job: SwarmJobInput, files: { input: string; output?: string; format?: 'jsonl' | 'parquet' }): Promise<SwarmJobHandle> {
    const format = files.format ?? formatOf(files.input);
    const form = new FormData();
    form.append('purpose', 'user_data');
    form.append('file', await openAsBlob(files.input), basename(files.input));
    const file = await this.#http.json<FileObject>('POST', '/v1/files', { body: form });
    const view = await this.#http.json<JobView>('POST', '/api/v1/jobs', { json: { ...job, inputFileId: file.id, format, swarm: this.name } });
    return new SwarmJobHandle(this.#http, view, files.output, this.#pollMs);
  }

  /**
   * Runs a command beside the swarm (`POST /api/v1/jobs/commands`): a registered job template's process on one of the
   * fleet's nodes, given ENDPOINT, MODEL (the swarm's unless `command.model` says) and a scoped token. `wait` on the
   * handle follows it; its log is `lunanexa jobs logs`.
   */
  async submitCommand(job: SwarmCommandInput): Promise<SwarmJobHandle> {
    const view = await this.#http.json<JobView>('POST', '/api/v1/jobs/commands', { json: { ...job, swarm: this.name } });
    return new SwarmJobHandle(this.#http, view, undefined, this.#pollMs);
  }

  /** Brings it down (`DELETE /api/v1/swarms/{name}`): its unfinished jobs cancelled, its deployment retired. False when it was down already. */
  async delete(): Promise<boolean> {
    try {
      await this.#http.json<SwarmDown>('DELETE', swarmPath(this.name));
      return true;
    } catch (error) {
      if (error instanceof LunaNexaError && error.status === 404) return false;
      throw error;
    }
  }

  /** The end of an `await using` scope: brings the swarm down unless `deleteOnExit` is false. */
  async [Symbol.asyncDispose](): Promise<void> {
    if (this.deleteOnExit) await this.delete();
  }
}

/** A job submitted to a swarm. */
export class SwarmJobHandle {
  readonly #http: Http;
  readonly #output: string | undefined;
  readonly #pollMs: number;
  #view: JobView;

  constructor(http: Http, view: JobView, output: string | undefined, pollMs: number) {
    this.#http = http;
    this.#view = view;
    this.#output = output;
    this.#pollMs = pollMs;
  }

  get id(): string {
    return this.#view.id;
  }

  /** The job as last read. */
  get view(): JobView {
    return this.#view;
  }

  /**
   * Follows the job until it ends (`onProgress` sees each reading: rows done, rate, time left), then downloads its
   * output file, if it has one, to the `output` path given at submission. Resolves with the job when it completed;
   * rejects with a `JobError` (after the download: the output holds what it finished) when it ended otherwise.
   */
  async wait(options: { onProgress?: (job: JobView) => void; intervalMs?: number; timeoutMs?: number; signal?: AbortSignal } = {}): Promise<JobView> {
    const deadline = options.timeoutMs === undefined ? Number.POSITIVE_INFINITY : Date.now() + options.timeoutMs;
    for (;;) {
      this.#view = await this.#http.json<JobView>('GET', `/api/v1/jobs/${encodeURIComponent(this.id)}`, { signal: options.signal });
      options.onProgress?.(this.#view);
      if (FINAL.has(this.#view.state)) break;
      if (Date.now() >= deadline) throw new Error(`job ${this.id} is still ${this.#view.state} after ${options.timeoutMs} ms`);
      await sleep(options.intervalMs ?? this.#pollMs, options.signal);
    }
    if (this.#output && this.#view.outputFileId) await this.download(this.#view.outputFileId, this.#output, options.signal);
    if (this.#view.state !== 'completed') throw new JobError(this.#view);
    return this.#view;
  }

  /** Writes the content of file `fileId` (`GET /v1/files/{id}/content`) to `path`, streamed. */
  async download(fileId: string, path: string, signal?: AbortSignal): Promise<void> {
    const response = await this.#http.request('GET', `/v1/files/${encodeURIComponent(fileId)}/content`, { signal });
    if (!response.body) throw new Error(`file ${fileId}: an empty answer`);
    await pipeline(Readable.fromWeb(response.body as NodeReadableStream<Uint8Array>), createWriteStream(path));
  }
}

const swarmPath = (name: string) => `/api/v1/swarms/${encodeURIComponent(name)}`;

function servingState(view: SwarmView): ServingState {
  return { name: view.name, model: view.model, desired: view.replicas.desired, ready: view.replicas.ready, status: view.status };
}

/** A job's input format by its file's extension. */
function formatOf(path: string): 'jsonl' | 'parquet' {
  const extension = extname(path).toLowerCase();
  if (extension === '.jsonl' || extension === '.ndjson') return 'jsonl';
  if (extension === '.parquet') return 'parquet';
  throw new Error(`${path}: a job's input is JSONL (.jsonl) or Parquet (.parquet); pass { format } for another name`);
}
