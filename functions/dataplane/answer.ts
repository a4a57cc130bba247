import type { Frame } from '../../shared/contracts/relay.js';
import { concat } from '../../shared/frame-codec.js';
import type { Ports } from './ports.js';
import type { WorkloadRow, WorkloadState } from '../services/workloads.js';
import type { DeploymentRoute } from './routing.js';
import type { Started } from './attempt.js';
import { CLIENT_TOO_SLOW } from '../link/frame-queue.js';
import type { InferenceRequest } from './request.js';
import type { InferenceError, InferenceResult, StreamTarget } from './result.js';

/** What a workload's record keeps of its answer: time to its first byte, and the tokens counted at its end. */
export type AnswerRecord = Required<Pick<WorkloadRow, 'firstByteMs' | 'promptTokens' | 'completionTokens'>>;

/** Ends the workload's record and lets go of what the request held (admission, cancel hooks). */
export type Finish = (state: WorkloadState, statusCode: number | null, errorCode: string | null, answered?: AnswerRecord) => void;

/** The workload columns are int4: a larger count (no runtime's, but the frame allows it) would cost the row. */
const MAX_RECORDED = 2 ** 31 - 1;
const recordable = (count: number | null) => (count !== null && count <= MAX_RECORDED ? count : null);

/**
 * The tokens a finished answer is recorded with: the runtime's own usage where it reported it; for a stream
 * without one (no `stream_options.include_usage`), the events the agent counted, which runtimes send about one
 * per token; for a whole answer without one, unknown.
 */
export function recordedTokens(end: Extract<Frame, { t: 'end' }>, stream: boolean): Pick<AnswerRecord, 'promptTokens' | 'completionTokens'> {
  return { promptTokens: recordable(end.promptTokens), completionTokens: recordable(end.completionTokens ?? (stream ? end.tokens : null)) };
}

export interface AnswerInput {
  ports: Ports;
  route: DeploymentRoute;
  request: InferenceRequest;
  workloadId: string;
  started: Started;
  /** Time held for a replica before the attempt that started (ms): queue time too, for the client. */
  heldMs: number;
  /** Cancelled (client gone, cancel API). */
  cancelled: AbortController;
  /** Cancelled or past the request's deadline: the request's one deadline timer. */
  until: AbortSignal;
  finish: Finish;
}

/** Why an answer that is not streamed was refused: it would pass the bound on what is held whole. */
const ANSWER_TOO_LARGE = 'answer_too_large';
const CANCELLED: InferenceError = { kind: 'cancelled', code: 'cancelled', message: 'the request was cancelled' };
const LATE: InferenceError = { kind: 'deadline', code: 'deadline_exceeded', message: 'the deadline passed during generation' };

/**
 * Relays a started attempt to the client: streamed batch by batch (the runtime's bytes, never re-serialised),
 * or collected for a plain answer. After the first byte there is no retry.
 */
export function answer(input: AnswerInput): InferenceResult | Promise<InferenceResult> {
  const { ports, route, request, workloadId, started, cancelled, finish } = input;
  const { dataPlane, metrics } = ports;
  const { replica, invocationId, head } = started;
  const { until } = input;
  const labels = { workspace: route.workspaceId, model: route.model, deployment: route.name, node: replica.machineName };
  const queueMs = input.heldMs + started.queueMs;
  let firstDataAt = 0;
  /** The answer's record: its first byte once it came, its tokens once it ended. */
  const answered: AnswerRecord = { firstByteMs: null, promptTokens: null, completionTokens: null };
  const ended = (frame: Extract<Frame, { t: 'end' }>) => Object.assign(answered, recordedTokens(frame, request.stream));
  let released = false;
  const release = () => {
    if (released) return;
    released = true;
    started.queue.close();
    started.slot.release();
    dataPlane.holder.release(invocationId);
  };
  const observeEnd = (tokens: number) => {
    const now = performance.now();
    metrics.requestDuration.observe(labels, (now - request.startedAt) / 1000);
    metrics.accelTime.observe(labels, (now - started.dispatchedAt) / 1000);
    if (firstDataAt && tokens > 1) {
      const generating = (now - firstDataAt) / 1000;
      if (generating > 0) {
        metrics.interTokenLatency.observe(labels, generating / (tokens - 1));
        metrics.tokensPerSecond.observe(labels, (tokens - 1) / generating);
      }
    }
  };
  const onCancel = () => {
    // Best effort: a node that is gone has dropped the invocation already.
    dataPlane.holder.cancel(invocationId, replica.machineId, String(cancelled.signal.reason ?? 'cancelled'));
    metrics.cancellations.inc(labels);
  };
  cancelled.signal.addEventListener('abort', onCancel, { once: true });
  const noteData = () => {
    if (firstDataAt) return;
    firstDataAt = performance.now();
    started.slot.firstByte();
    const ttftMs = firstDataAt - started.dispatchedAt;
    answered.firstByteMs = Math.round(ttftMs);
    metrics.ttft.observe(labels, ttftMs / 1000);
  };
  const failed = (code: string, message: string): InferenceResult => {
    release();
    metrics.runtimeFailures.inc(labels);
    finish('failed', 502, code, answered);
    return { ok: false, error: { kind: 'bad_gateway', code, message } };
  };

  if (!request.stream) {
    const parts: Uint8Array[] = [];
    /** The answer's bytes so far, counted in the instance's budget until the answer is over. */
    let holding = 0;
    const tooLarge = (): InferenceResult => {
      dataPlane.holder.cancel(invocationId, replica.machineId, ANSWER_TOO_LARGE);
      cancelled.signal.removeEventListener('abort', onCancel);
      release();
      finish('failed', 502, ANSWER_TOO_LARGE, answered);
      return {
        ok: false,
        error: { kind: 'bad_gateway', code: ANSWER_TOO_LARGE, message: 'the answer is larger than an answer that is not streamed may be: ask for it streamed' },
      };
    };
    const collect = async (): Promise<InferenceResult> => {
      let pending = started.rest;
      for (;;) {
        for (const frame of pending) {
          if (frame.t === 'data') {
            noteData();
            if (!dataPlane.budget.take('plain', holding, frame.d.length)) return tooLarge();
            holding += frame.d.length;
            parts.push(frame.d);
          } else if (frame.t === 'end') {
            release();
            observeEnd(frame.tokens);
            cancelled.signal.removeEventListener('abort', onCancel);
            finish(head.status < 400 ? 'succeeded' : 'failed', head.status, null, ended(frame));
            const timing = { queueMs, accelMs: performance.now() - started.dispatchedAt };
            return { ok: true, kind: 'body', workloadId, status: head.status, contentType: head.contentType, body: concat(parts), timing };
          } else if (frame.t === 'error') {
            return failed(frame.code, frame.message);
          }
        }
        const item = await started.queue.next(until);
        if (!item) {
          release();
          const error = cancelled.signal.aborted ? CANCELLED : LATE;
          finish(cancelled.signal.aborted ? 'cancelled' : 'failed', null, error.code, answered);
          return { ok: false, error };
        }
        if (item.kind === 'failed') return failed(item.code, item.message);
        pending = item.frames;
      }
    };
    return collect().finally(() => dataPlane.budget.give(holding));
  }

  // Streamed: each batch of the runtime's bytes is written as it comes, under the socket's backpressure.
  let gone = false;
  const nextFrames = async (): Promise<Frame[]> => {
    const item = await started.queue.next(until);
    if (!item)
      return [
        {
          o: -1,
          t: 'error',
          code: cancelled.signal.aborted ? CANCELLED.code : LATE.code,
          message: cancelled.signal.aborted ? CANCELLED.message : LATE.message,
        },
      ];
    if (item.kind === 'failed') return [{ o: -1, t: 'error', code: item.code, message: item.message }];
    return item.frames;
  };
  const pump = async (target: StreamTarget) => {
    // A client that stays behind past the relay's bound is cut now: its write may wait for a drain that never
    // comes, and the runtime call stops rather than fill memory nobody reads.
    started.queue.onOverflow = () => {
      dataPlane.holder.cancel(invocationId, replica.machineId, CLIENT_TOO_SLOW);
      target.abandon(CLIENT_TOO_SLOW, 'the client read the answer slower than the runtime wrote it');
    };
    let pending: Frame[] | null = started.rest;
    for (;;) {
      const frames = pending ?? (await nextFrames());
      pending = null;
      const chunks: Uint8Array[] = [];
      for (const frame of frames) {
        if (frame.t === 'data') {
          if (frame.d.length > 0) chunks.push(frame.d);
        } else if (frame.t === 'end') {
          if (chunks.length > 0 || frame.tokens === 0) noteData();
          target.end(chunks);
          release();
          observeEnd(frame.tokens);
          cancelled.signal.removeEventListener('abort', onCancel);
          finish('succeeded', head.status, null, ended(frame));
          return;
        } else if (frame.t === 'error') {
          // After the first byte there is no retry: the client gets an explicit error, never a silent truncation.
          if (frame.told === true) target.end(chunks);
          else target.fail(chunks, frame.code, frame.message);
          release();
          // A cancellation is counted as one (onCancel), and a client cut for reading too slowly as one of those,
          // not as a failure of the runtime.
          if (frame.code === CLIENT_TOO_SLOW) metrics.slowClientsCut.inc(labels);
          else if (!cancelled.signal.aborted) metrics.runtimeFailures.inc(labels);
          if (frame.code === CLIENT_TOO_SLOW) finish('failed', head.status, CLIENT_TOO_SLOW, answered);
          else finish(cancelled.signal.aborted ? 'cancelled' : 'failed', head.status, gone ? 'client_disconnected' : frame.code, answered);
          return;
        }
      }
      if (chunks.length > 0) {
        noteData();
        await target.write(chunks);
      }
    }
  };
  return {
    ok: true,
    kind: 'stream',
    workloadId,
    status: head.status,
    contentType: head.contentType,
    timing: { queueMs, accelMs: performance.now() - started.dispatchedAt },
    pipe(target) {
      void pump(target).catch((error: unknown) => {
        ports.logger.error({ err: error instanceof Error ? error.message : String(error), workloadId }, 'relaying a stream failed');
        target.end([]);
        release();
        finish('failed', head.status, 'internal', answered);
      });
    },
    clientGone() {
      gone = true;
      cancelled.abort('client disconnected');
    },
  };
}
