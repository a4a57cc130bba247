import type { Readable } from 'node:stream';
import type { Assignment } from '../../shared/contracts/desired.js';
import type { PullProgress } from '../artifacts/cache.js';

/** A running runtime the agent supervises (its own child, or one adopted after an agent restart). */
export interface RuntimeHandle {
  assignmentId: string;
  pid: number;
  port: number;
  baseUrl: string;
  /** Random per launch: tells our runtime apart from an unrelated process that reused the pid. */
  instanceId: string;
  specHash: string;
  startedAt: string;
  /** Where the readiness probe asks. */
  healthPath: string;
  /** Where its engine's metrics are read (docs/telemetry.md); null: it serves none. */
  metricsPath: string | null;
  /** The GPUs reserved for it (its CUDA_VISIBLE_DEVICES); none when its assignment asks for none. */
  gpuIndices: number[];
  /**
   * Random per launch (its LUNANEXA_RUNTIME_TOKEN, `{runtime_token}` in its argv): sent as `Authorization: Bearer`
   * on every call and probe, so that only the agent calls it. Null for a runtime an older agent launched without one.
   */
  token: string | null;
  /**
   * The uid it runs as when the agent switched users for it: the uid of the range it holds, or the policy's one
   * user's. Null when it runs as the agent, or an older agent launched it without keeping it.
   */
  uid: number | null;
}

/**
 * A launch no restart can cure: what the assignment asks for is outside what this node runs (its local policy,
 * an executable that is not the pinned one). The supervisor reports the runtime failed and does not restart it;
 * a new assignment (another template) is judged afresh.
 */
export class LaunchRefused extends Error {
  override readonly name = 'LaunchRefused';
}

/** A refusal by the node's local policy, worded so that an operator reading the runtime's status knows whose. */
export const refusedByPolicy = (reason: string) => new LaunchRefused(`refused by local policy: ${reason}`);

const DETAIL = Symbol('localDetail');

/**
 * `error` with what only the node's own log may tell (a real path outside the artifact roots, a system error naming
 * one): its message goes to the control plane, where any operator reads it; the supervisor logs the detail here.
 */
export function withLocalDetail<E extends Error>(error: E, detail: string): E {
  return Object.assign(error, { [DETAIL]: detail });
}

/** The detail `withLocalDetail` attached, if any. */
export function localDetail(error: unknown): string | undefined {
  return error instanceof Error ? (error as Error & { [DETAIL]?: string })[DETAIL] : undefined;
}

/** A runtime's answer: its body is a Node stream, read straight into frames (no web-stream layer on the hot path). */
export interface RuntimeResponse {
  status: number;
  contentType: string | null;
  body: Readable;
}

/** A runtime found running (after an agent restart) that the supervisor takes over instead of launching another. */
export interface Adoption {
  handle: RuntimeHandle;
  /** False while it is still loading: the supervisor keeps waiting for it, within its start timeout. */
  ready: boolean;
}

/**
 * How the supervisor drives one kind of runtime (vLLM, llama.cpp, the simulator...). Every method is
 * idempotent; errors are thrown and turned into a `failed` state by the supervisor (for good: `LaunchRefused`).
 */
export interface RuntimeAdapter {
  /**
   * Finds this assignment's runtime left running by an earlier agent, to adopt it. One that cannot be adopted
   * (another spec, or one the local policy now refuses) is stopped if it is ours, so that launching a new one never
   * runs two and a refused one never keeps running.
   */
  inspect(assignment: Assignment): Promise<Adoption | null>;
  /**
   * Judges the assignment against the local policy, then gets everything the runtime needs locally (artifacts,
   * digests, a version's files) before start; stops early when `signal` aborts. `onPull` is called only when files
   * are to be downloaded, with the bytes done so far against the total, first before any byte is downloaded.
   */
  prepare(assignment: Assignment, signal: AbortSignal, onPull?: (progress: PullProgress) => void): Promise<void>;
  start(assignment: Assignment): Promise<RuntimeHandle>;
  /**
   * Its engine's metrics (Prometheus text), read from its `metricsPath`; null when it declares none or the read
   * failed. Absent: the adapter's runtimes have none.
   */
  metrics?(handle: RuntimeHandle): Promise<string | null>;
  /** Readiness probe: true when the runtime serves. */
  ready(handle: RuntimeHandle): Promise<boolean>;
  /** True while the runtime's process exists. */
  alive(handle: RuntimeHandle): boolean;
  /** Forwards one inference request to the runtime. */
  invoke(
    handle: RuntimeHandle,
    path: string,
    init: { method: string; headers: Record<string, string>; body?: string; signal?: AbortSignal },
  ): Promise<RuntimeResponse>;
  stop(handle: RuntimeHandle): Promise<void>;
  /** The bounded tail of the runtime's output; readable with no process (a crashed runtime's last lines). */
  logs(assignmentId: string, lines: number): Promise<string[]>;
  /** Keeps the runtime's output within its bound on disk; the supervisor calls it about every second. */
  rotateLogs(assignmentId: string): Promise<void>;
  /** Deletes what is left of a runtime retired for good (its output). */
  forget(assignmentId: string): Promise<void>;
  /** Stops the runtimes an earlier agent left for assignments not in `keep`; absent: it leaves none behind. */
  releaseOrphans?(keep: ReadonlySet<string>): Promise<void>;
  /** The model versions (`mv_...`) verified in this adapter's cache, for heartbeats; absent: it caches none. */
  cachedVersions?(): string[];
}
