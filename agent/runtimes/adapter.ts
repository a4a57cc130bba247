import type { Readable } from 'node:stream';
import type { Assignment } from '../../shared/contracts/desired.js';

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
}

/** A runtime's answer: its body is a Node stream, read straight into frames (no web-stream layer on the hot path). */
export interface RuntimeResponse {
  status: number;
  contentType: string | null;
  body: Readable;
}

/**
 * How the supervisor drives one kind of runtime (vLLM, llama.cpp, the simulator...). Every method is
 * idempotent; errors are thrown and turned into a `failed` state by the supervisor.
 */
export interface RuntimeAdapter {
  /** Finds a runtime of this assignment that is already running (after an agent restart), to adopt it. */
  inspect(assignment: Assignment): Promise<RuntimeHandle | null>;
  /** Gets everything the runtime needs locally (artifacts, digests) before start. */
  prepare(assignment: Assignment): Promise<void>;
  start(assignment: Assignment): Promise<RuntimeHandle>;
  /** Readiness probe: true when the runtime serves. */
  ready(handle: RuntimeHandle): Promise<boolean>;
  /** True while the runtime's process exists. */
  alive(handle: RuntimeHandle): boolean;
  /** Forwards one inference request to the runtime. */
  invoke(handle: RuntimeHandle, path: string, init: { method: string; headers: Record<string, string>; body?: string; signal?: AbortSignal }): Promise<RuntimeResponse>;
  /** Lets in-flight work finish (bounded), before `stop`. */
  drain(handle: RuntimeHandle): Promise<void>;
  stop(handle: RuntimeHandle): Promise<void>;
  /** The bounded tail of the runtime's output. */
  logs(handle: RuntimeHandle, lines: number): Promise<string[]>;
}
