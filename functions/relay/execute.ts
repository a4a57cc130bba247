import type { Frame, InferencePath } from '../../shared/contracts/relay.js';
import { newId } from '../../shared/ids.js';
import type { Actor, Ports } from '../context.js';
import { SlotWaitAborted } from '../policy/admission.js';
import { pickReplica } from '../scheduler/route.js';
import { recordWorkload, workloadByKey, type WorkloadRow, type WorkloadState } from '../services/workloads.js';
import type { ServiceCtx } from '../services/service-context.js';
import { OpenAIError, openAIErrorBody } from '../api/v1/errors.js';
import { FrameQueue, type QueueItem } from './frame-queue.js';
import type { StreamSink } from '../http/node-io.js';
import type { DeploymentRoute, RoutableReplica } from './routing.js';

export interface InferenceRequest {
  actor: Actor;
  path: InferencePath;
  kind: 'chat' | 'completions' | 'embeddings';
  model: string;
  /** The validated request body; forwarded with `model` rewritten to the runtime's model. */
  body: Record<string, unknown>;
  stream: boolean;
  /** Epoch ms. */
  deadline: number;
  idempotencyKey: string | null;
  /** Aborts when the client goes away. */
  signal: AbortSignal;
  /** Opens the streamed answer (see `openStream` in functions/http/node-io.ts). */
  openStream: (status: number, headers: Record<string, string>, onGone: () => void) => StreamSink;
  startedAt: number;
}

/** The SSE event that ends a stream broken after its first byte, in the OpenAI error envelope. */
function errorEvent(code: string, message: string): string {
  return `data: ${JSON.stringify(openAIErrorBody(new OpenAIError(502, 'server_error', code, message)))}\n\n`;
}

type Attempt =
  | { ok: true; head: Extract<Frame, { t: 'head' }>; rest: Frame[]; queue: FrameQueue; replica: RoutableReplica; invocationId: string; queueMs: number; dispatchedAt: number }
  | { ok: false; code: string; message: string; retry: boolean; node?: string };

/**
 * `AbortSignal.any([signal, AbortSignal.timeout(ms)])` that does fire: Node 20 lets a timeout signal that only
 * `any()` refers to be garbage-collected, and then it never aborts. The timer here holds it; `clear()` stops it.
 */
function abortAfter(signal: AbortSignal, ms: number): { signal: AbortSignal; clear(): void } {
  const controller = new AbortController();
  const onAbort = () => controller.abort(signal.reason);
  // setTimeout fires at once past 2^31-1 ms; a deadline that far away is as good as none.
  const timer = setTimeout(() => controller.abort(new DOMException('The operation timed out.', 'TimeoutError')), Math.min(Math.max(1, ms), 2 ** 31 - 1));
  if (signal.aborted) onAbort();
  else signal.addEventListener('abort', onAbort, { once: true });
  return {
    signal: controller.signal,
    clear: () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
    },
  };
}

/**
 * Executes one canonical workload (DESIGN.md section 5): admission, routing with retries before the first
 * byte, dispatch over the node's stream, relay of the runtime's bytes in batches (never re-serialised),
 * cancellation, deadlines, idempotency and metrics. Returns the client's Response.
 */
export async function executeInference(ports: Ports, request: InferenceRequest): Promise<Response> {
  const { relay, config, metrics } = ports;
  const ctx: ServiceCtx = { db: ports.store.db, ports, actor: request.actor.tokenId };
  await relay.routing.fresh();
  const route = relay.routing.resolve(request.actor.workspaceId, request.model);
  if (!route) throw new OpenAIError(404, 'not_found_error', 'model_not_found', `The model \`${request.model}\` does not exist or you do not have access to it.`, 'model');
  const labels = { model: route.model, deployment: route.name };

  if (!relay.admission.enter(route.id, route.queueCapacity)) {
    metrics.admissionRejected.inc(labels);
    throw new OpenAIError(429, 'rate_limit_error', 'capacity_exceeded', `${route.name} is at capacity; retry later`, null, { 'Retry-After': '1' });
  }

  const workloadId = newId('workload');
  const row: WorkloadRow = {
    id: workloadId,
    workspaceId: request.actor.workspaceId,
    deploymentId: route.id,
    kind: request.kind,
    idempotencyKey: request.idempotencyKey,
    deadline: new Date(request.deadline),
    state: 'running',
    instanceId: ports.instanceId,
    createdAt: new Date(),
  };
  let finished = false;
  let attempts = 0;
  let machineId: string | null = null;
  /** The machine name of the last attempt that failed, for the node label of retries and cancellations. */
  let lastNode: string | null = null;
  const finish = (state: WorkloadState, statusCode: number | null, errorCode: string | null) => {
    if (finished) return;
    finished = true;
    relay.admission.leave(route.id);
    relay.live.delete(workloadId);
    unsubscribeCancel();
    relay.workloads.put(workloadId, { ...row, state, machineId, attempts, statusCode, errorCode, finishedAt: new Date() });
  };

  if (request.idempotencyKey) {
    // The insert is the guard, so it is written before anything runs; the rest of the record is written behind.
    let fresh: boolean;
    try {
      fresh = await recordWorkload({ ctx, input: row });
    } catch (error) {
      relay.admission.leave(route.id);
      throw error;
    }
    if (!fresh) {
      relay.admission.leave(route.id);
      finished = true;
      const previous = await workloadByKey({ ctx, input: { workspaceId: request.actor.workspaceId, idempotencyKey: request.idempotencyKey } });
      throw new OpenAIError(409, 'invalid_request_error', 'idempotency_key_reused', `Idempotency-Key already used by workload ${previous?.id ?? 'unknown'} (${previous?.state ?? 'unknown'}); it never executes twice`, null, {
        ...(previous ? { 'X-LunaNexa-Workload-Id': previous.id } : {}),
      });
    }
  } else {
    relay.workloads.put(workloadId, row);
  }

  // A cancel API call or a client disconnect both end up here.
  const cancelled = new AbortController();
  request.signal.addEventListener('abort', () => cancelled.abort('client disconnected'), { once: true });
  relay.live.set(workloadId, { cancel: (reason) => cancelled.abort(reason) });
  // The cancel API may be answered by another instance: it reaches this one through the bus.
  const unsubscribeCancel = ports.bus.subscribe(`workload:${workloadId}`, (message) => {
    if (message.type === 'cancel-workload') cancelled.abort('cancelled by API');
  });

  const body = JSON.stringify({ ...request.body, model: route.model });
  const tried = new Set<string>();
  let last: Extract<Attempt, { ok: false }> | null = null;
  try {
    while (attempts < config.maxAttempts && Date.now() < request.deadline && !cancelled.signal.aborted) {
      const attempt = await tryReplica(ports, route, request, workloadId, body, tried, cancelled.signal, () => {
        // Counted only once a replica was actually picked: running out of replicas is no attempt.
        attempts += 1;
        if (attempts > 1) metrics.retries.inc({ ...labels, node: lastNode ?? 'none' });
      });
      if (attempt.ok) {
        machineId = attempt.replica.machineId;
        return respond(ports, route, request, workloadId, attempt, cancelled, finish);
      }
      if (attempt.node) lastNode = attempt.node;
      // Running out of replicas to try must not hide why the ones tried failed.
      if (attempt.code !== 'no_replica' || !last) last = attempt;
      if (!attempt.retry) break;
    }
  } catch (error) {
    finish('failed', 500, 'internal');
    throw error;
  }
  if (cancelled.signal.aborted) {
    finish('cancelled', null, 'cancelled');
    metrics.cancellations.inc({ ...labels, node: lastNode ?? 'none' });
    throw new OpenAIError(499 as never, 'invalid_request_error', 'cancelled', 'the request was cancelled');
  }
  if (Date.now() >= request.deadline || last?.code === 'deadline_exceeded') {
    finish('failed', 504, 'deadline_exceeded');
    throw new OpenAIError(504, 'timeout_error', 'deadline_exceeded', 'the deadline passed before the request could be served');
  }
  const noReplica = !last || last.code === 'no_replica';
  finish('failed', noReplica ? 503 : 502, last?.code ?? 'no_replica');
  if (!last || noReplica) throw new OpenAIError(503, 'server_error', 'no_replica_available', `no routable replica of ${route.name}; retry later`, null, { 'Retry-After': '1' });
  throw new OpenAIError(502, 'server_error', last.code, `the request failed on every replica tried: ${last.message}`);
}

/** One attempt: pick, queue, dispatch, and wait for the runtime's head and first body bytes. */
async function tryReplica(
  ports: Ports,
  route: DeploymentRoute,
  request: InferenceRequest,
  workloadId: string,
  body: string,
  tried: Set<string>,
  signal: AbortSignal,
  onPicked: () => void,
): Promise<Attempt> {
  const { relay, config, metrics } = ports;
  const candidates = route.replicas.map((replica) => ({ ...replica, ...relay.admission.load(replica.assignmentId), concurrency: route.maxConcurrency, warm: true }));
  const replica = pickReplica(candidates, tried);
  if (!replica) return { ok: false, code: 'no_replica', message: 'no routable replica left to try', retry: false };
  tried.add(replica.assignmentId);
  onPicked();
  const labels = { model: route.model, deployment: route.name, node: replica.machineName };

  let queueMs: number;
  try {
    queueMs = await relay.admission.acquire(replica.assignmentId, route.maxConcurrency, request.deadline, signal);
  } catch (error) {
    if (error instanceof SlotWaitAborted) return { ok: false, code: error.reason === 'deadline' ? 'deadline_exceeded' : 'cancelled', message: error.message, retry: false, node: replica.machineName };
    throw error;
  }
  metrics.queueTime.observe(labels, queueMs / 1000);
  const invocationId = newId('invocation');
  const queue = new FrameQueue();
  const dispatchedAt = performance.now();
  const giveUp = (code: string, message: string, retry: boolean): Attempt => {
    relay.admission.release(replica.assignmentId);
    relay.hub.release(invocationId);
    void relay.hub.cancel(invocationId, replica.machineId, code).catch(() => {});
    if (code !== 'cancelled') metrics.runtimeFailures.inc(labels);
    return { ok: false, code, message, retry, node: replica.machineName };
  };
  try {
    await relay.hub.dispatch(
      { invocationId, workloadId, assignmentId: replica.assignmentId, path: request.path, body, deadline: request.deadline, idempotencyKey: request.idempotencyKey, stream: request.stream },
      replica.machineId,
      queue,
    );
  } catch (error) {
    return giveUp('dispatch_failed', error instanceof Error ? error.message : String(error), true);
  }

  // The node has until the ack timeout to show it got the invoke (its frames upload starting is enough), then
  // the runtime has until the deadline. The attempt holds until the first bytes of the body: a failure before
  // them has sent the client nothing yet, so it is retried elsewhere.
  let wait = abortAfter(signal, Math.min(config.invokeAckTimeoutMs, request.deadline - Date.now()));
  let acked = false;
  const frames: Frame[] = [];
  const bodyStarted = () => {
    const at = frames.findIndex((f) => f.t === 'head');
    if (at < 0) return frames.some((f) => f.t === 'error' || f.t === 'end');
    return frames.slice(at + 1).some((f) => f.t !== 'data' || f.d.length > 0);
  };
  try {
    while (!bodyStarted()) {
      const item: QueueItem | null = await queue.next(wait.signal);
      if (!item) {
        if (signal.aborted) return giveUp('cancelled', 'cancelled', false);
        if (acked || Date.now() >= request.deadline) return giveUp('deadline_exceeded', 'the deadline passed before the runtime answered', false);
        return giveUp('node_timeout', 'the node did not answer in time', true);
      }
      if (!acked) {
        acked = true;
        wait.clear();
        wait = abortAfter(signal, request.deadline - Date.now());
      }
      if (item.kind === 'failed') return giveUp(item.code, item.message, true);
      frames.push(...item.frames);
    }
  } finally {
    wait.clear();
  }
  const headIndex = frames.findIndex((f) => f.t === 'head');
  const head = frames[headIndex];
  if (!head || head.t !== 'head') {
    const error = frames.find((f) => f.t === 'error');
    return giveUp(error && error.t === 'error' ? error.code : 'runtime_error', error && error.t === 'error' ? error.message : 'no response head', error?.t === 'error' && error.code === 'deadline_exceeded' ? false : true);
  }
  // A runtime failure before the first byte reached the client is retried elsewhere.
  if (head.status >= 500) return giveUp('runtime_error', `runtime answered ${head.status}`, true);
  // Broken before its first body byte: nothing reached the client either.
  const first = frames.slice(headIndex + 1).find((f) => f.t !== 'data' || f.d.length > 0);
  if (first?.t === 'error') return giveUp(first.code, first.message, first.code !== 'deadline_exceeded' && first.code !== 'cancelled');
  return { ok: true, head, rest: frames.slice(headIndex + 1), queue, replica, invocationId, queueMs, dispatchedAt };
}

/** Relays a successful attempt to the client: streamed batch by batch, or collected for a plain response. */
function respond(
  ports: Ports,
  route: DeploymentRoute,
  request: InferenceRequest,
  workloadId: string,
  attempt: Extract<Attempt, { ok: true }>,
  cancelled: AbortController,
  finish: (state: WorkloadState, statusCode: number | null, errorCode: string | null) => void,
): Response | Promise<Response> {
  const { relay, metrics } = ports;
  const { replica, invocationId, head } = attempt;
  // One signal for the rest of the request: cancelled, or out of time.
  const deadline = abortAfter(cancelled.signal, request.deadline - Date.now());
  const until = deadline.signal;
  const labels = { model: route.model, deployment: route.name, node: replica.machineName };
  let firstDataAt = 0;
  let released = false;
  const release = () => {
    if (released) return;
    released = true;
    deadline.clear();
    relay.admission.release(replica.assignmentId);
    relay.hub.release(invocationId);
  };
  const observeEnd = (tokens: number) => {
    const now = performance.now();
    const seconds = (now - request.startedAt) / 1000;
    metrics.requestDuration.observe(labels, seconds);
    metrics.accelTime.observe(labels, (now - attempt.dispatchedAt) / 1000);
    if (firstDataAt && tokens > 0) {
      const generating = (now - firstDataAt) / 1000;
      if (tokens > 1 && generating > 0) {
        metrics.interTokenLatency.observe(labels, generating / (tokens - 1));
        metrics.tokensPerSecond.observe(labels, (tokens - 1) / generating);
      }
    }
  };
  const onCancel = () => {
    void relay.hub.cancel(invocationId, replica.machineId, String(cancelled.signal.reason ?? 'cancelled')).catch(() => {});
    metrics.cancellations.inc(labels);
  };
  cancelled.signal.addEventListener('abort', onCancel, { once: true });
  const noteData = () => {
    if (firstDataAt) return;
    firstDataAt = performance.now();
    metrics.ttft.observe(labels, (firstDataAt - attempt.dispatchedAt) / 1000);
  };
  const timing = (accelMs: number) => `queue;dur=${attempt.queueMs.toFixed(2)}, accel;dur=${accelMs.toFixed(2)}`;
  const headers = (accelMs: number): Record<string, string> => ({
    'content-type': head.contentType,
    'x-lunanexa-workload-id': workloadId,
    'server-timing': timing(accelMs),
  });

  if (!request.stream) {
    return (async () => {
      const parts: string[] = [];
      let pending = attempt.rest;
      for (;;) {
        for (const frame of pending) {
          if (frame.t === 'data') {
            noteData();
            parts.push(frame.d);
          } else if (frame.t === 'end') {
            release();
            observeEnd(frame.tokens);
            cancelled.signal.removeEventListener('abort', onCancel);
            finish(head.status < 400 ? 'succeeded' : 'failed', head.status, null);
            return new Response(parts.join(''), { status: head.status, headers: headers(performance.now() - attempt.dispatchedAt) });
          } else if (frame.t === 'error') {
            release();
            metrics.runtimeFailures.inc(labels);
            finish('failed', 502, frame.code);
            throw new OpenAIError(502, 'server_error', frame.code, frame.message);
          }
        }
        const item = await attempt.queue.next(until);
        if (!item) {
          release();
          finish(cancelled.signal.aborted ? 'cancelled' : 'failed', null, cancelled.signal.aborted ? 'cancelled' : 'deadline_exceeded');
          throw cancelled.signal.aborted
            ? new OpenAIError(499 as never, 'invalid_request_error', 'cancelled', 'the request was cancelled')
            : new OpenAIError(504, 'timeout_error', 'deadline_exceeded', 'the deadline passed during generation');
        }
        if (item.kind === 'failed') {
          release();
          metrics.runtimeFailures.inc(labels);
          finish('failed', 502, item.code);
          throw new OpenAIError(502, 'server_error', item.code, item.message);
        }
        pending = item.frames;
      }
    })();
  }

  // Streamed: each batch of the runtime's bytes is written as it comes, under the socket's backpressure.
  let gone = false;
  const sink = request.openStream(head.status, { ...headers(performance.now() - attempt.dispatchedAt), 'cache-control': 'no-cache, no-transform', 'x-accel-buffering': 'no' }, () => {
    gone = true;
    cancelled.abort('client disconnected');
  });
  const nextFrames = async (): Promise<Frame[]> => {
    const item = await attempt.queue.next(until);
    if (!item) return [{ o: -1, t: 'error', code: cancelled.signal.aborted ? 'cancelled' : 'deadline_exceeded', message: cancelled.signal.aborted ? 'the request was cancelled' : 'the deadline passed during generation' }];
    if (item.kind === 'failed') return [{ o: -1, t: 'error', code: item.code, message: item.message }];
    return item.frames;
  };
  const pump = async () => {
    let pending: Frame[] | null = attempt.rest;
    for (;;) {
      const frames = pending ?? (await nextFrames());
      pending = null;
      let text = '';
      for (const frame of frames) {
        if (frame.t === 'data') text += frame.d;
        else if (frame.t === 'end') {
          if (text || frame.tokens === 0) noteData();
          sink.end(text);
          release();
          observeEnd(frame.tokens);
          cancelled.signal.removeEventListener('abort', onCancel);
          finish('succeeded', head.status, null);
          return;
        } else if (frame.t === 'error') {
          // After the first byte there is no retry: the client gets an explicit error, never a silent truncation.
          sink.end(frame.told === true ? text : text + errorEvent(frame.code, frame.message));
          release();
          // A cancellation is counted as one (onCancel), not as a failure of the runtime.
          if (!cancelled.signal.aborted) metrics.runtimeFailures.inc(labels);
          finish(cancelled.signal.aborted ? 'cancelled' : 'failed', head.status, gone ? 'client_disconnected' : frame.code);
          return;
        }
      }
      if (text) {
        noteData();
        await sink.write(text);
      }
    }
  };
  void pump().catch((error: unknown) => {
    ports.logger.error({ err: error instanceof Error ? error.message : String(error), workloadId }, 'relaying a stream failed');
    sink.end('');
    release();
    finish('failed', head.status, 'internal');
  });
  return sink.response;
}
