import type { z } from 'zod';
import type { DeploymentDetail, DeploymentSpec } from '../shared/contracts/deployment.js';
import { Http, LunaNexaError, sleep, type ConnectionOptions } from './http.js';

/** What serves a model, as any `Serving` reports it: how many replicas are wanted and how many serve. */
export interface ServingState {
  name: string;
  model: string;
  desired: number;
  ready: number;
  /** The implementation's own word for where it stands (a deployment: its rollout's state; a swarm: its status). */
  status: string;
}

/** How long `waitReady` waits, and how often it looks. */
export interface WaitOptions {
  /** Default 10 minutes. */
  timeoutMs?: number;
  /** Default 1 s. */
  intervalMs?: number;
  signal?: AbortSignal;
}

/**
 * Something that serves a model and can be created, waited on, read and deleted: a deployment over the management
 * API (`DeploymentServing`); a swarm serves through one.
 */
export interface Serving {
  /** Creates it, or updates it to what it declares. */
  createOrUpdate(): Promise<ServingState>;
  /** Waits until it serves: a replica ready. Rejects once `timeoutMs` passes. */
  waitReady(options?: WaitOptions): Promise<ServingState>;
  status(): Promise<ServingState>;
  /** Deletes it; false when there was nothing to delete. */
  delete(): Promise<boolean>;
}

/** A deployment's spec as the API takes it (`PUT /api/v1/deployments/{name}`), its defaults optional. */
export type DeploymentInput = z.input<typeof DeploymentSpec>;

const DEFAULT_WAIT_MS = 600_000;

/**
 * Polls `read` until `ready` says so, or rejects after `timeoutMs` with what it saw last. Shared by deployments and
 * swarms.
 */
export async function pollUntil<T>(read: () => Promise<T>, ready: (value: T) => boolean, what: (value: T) => string, options: WaitOptions = {}): Promise<T> {
  const deadline = Date.now() + (options.timeoutMs ?? DEFAULT_WAIT_MS);
  for (;;) {
    const value = await read();
    if (ready(value)) return value;
    if (Date.now() >= deadline) throw new Error(`still not serving after ${Math.round((options.timeoutMs ?? DEFAULT_WAIT_MS) / 1000)} s: ${what(value)}`);
    await sleep(options.intervalMs ?? 1_000, options.signal);
  }
}

/** A deployment over the management API: `Serving` by `PUT`, `GET` and `DELETE /api/v1/deployments/{name}`. */
export class DeploymentServing implements Serving {
  readonly #http: Http;

  constructor(
    readonly name: string,
    readonly spec: DeploymentInput,
    options: ConnectionOptions = {},
  ) {
    this.#http = new Http(options);
  }

  #path() {
    return `/api/v1/deployments/${encodeURIComponent(this.name)}`;
  }

  async createOrUpdate(): Promise<ServingState> {
    await this.#http.json('PUT', this.#path(), { json: this.spec });
    return await this.status();
  }

  async status(): Promise<ServingState> {
    return stateOf(await this.detail());
  }

  /** The deployment as `GET /api/v1/deployments/{name}` shows it: its spec, its status, its recent events. */
  async detail(): Promise<DeploymentDetail> {
    return await this.#http.json<DeploymentDetail>('GET', this.#path());
  }

  async waitReady(options?: WaitOptions): Promise<ServingState> {
    return await pollUntil(
      () => this.status(),
      (s) => s.ready >= 1,
      (s) => `${s.ready}/${s.desired} replicas ready (${s.status})`,
      options,
    );
  }

  async delete(): Promise<boolean> {
    try {
      await this.#http.request('DELETE', this.#path());
      return true;
    } catch (error) {
      if (error instanceof LunaNexaError && error.status === 404) return false;
      throw error;
    }
  }
}

function stateOf(d: DeploymentDetail): ServingState {
  return {
    name: d.name,
    model: d.model,
    desired: d.status.desired,
    ready: d.status.ready,
    status: d.status.degraded ? 'degraded' : d.status.rollout.state,
  };
}
