import type { Frame } from '../../shared/contracts/relay.js';
import { relayableContentType } from '../../shared/contracts/openai.js';
import { newId } from '../../shared/ids.js';
import type { Ports } from './ports.js';
import { type HeldSlot, SlotWaitAborted } from './admission.js';
import { pickReplica, routeCandidates } from '../core/scheduler/route.js';
import { FrameQueue, type QueueItem } from '../link/frame-queue.js';
import type { DeploymentRoute, RoutableReplica } from './routing.js';
import type { InferenceRequest } from './request.js';
import { REPLICA_DRAINING, type AttemptOutcome } from './retry.js';

export interface AttemptInput {
  ports: Ports;
  route: DeploymentRoute;
  request: InferenceRequest;
  workloadId: string;
  /** The request body as forwarded, `model` rewritten. */
  body: string;
  /** Replicas tried by earlier attempts; the one picked is added. */
  tried: Set<string>;
  /** Cancelled (client gone, cancel API). */
  signal: AbortSignal;
  /** Cancelled or past the request's deadline: the request's one deadline timer. */
  until: AbortSignal;
  /** A replica was picked: running out of replicas is no attempt. */
  onPicked: () => void;
}

/** A replica answered with a head and its first body bytes (or its end): the answer can start. */
export interface Started {
  ok: true;
  head: Extract<Frame, { t: 'head' }>;
  /** The frames after the head received so far. */
  rest: Frame[];
  queue: FrameQueue;
  replica: RoutableReplica;
  invocationId: string;
  /** The replica's slot the invocation holds (here, or at its link holder elsewhere). */
  slot: HeldSlot;
  /** Time queued for the replica's slot (ms). */
  queueMs: number;
  /** `performance.now()` at dispatch. */
  dispatchedAt: number;
}

export type Attempt = Started | { ok: false; outcome: AttemptOutcome /** The replica's machine name, when one was picked. */; node: string | null };

/**
 * One attempt: pick a replica, queue for its slot, dispatch, and wait for the runtime's head and first body
 * bytes. A failure before them has sent the client nothing yet, so the caller may retry elsewhere.
 */
export async function tryReplica(input: AttemptInput): Promise<Attempt> {
  const { ports, route, request, signal } = input;
  const { dataPlane, config, metrics } = ports;
  if (signal.aborted) return { ok: false, outcome: { kind: 'cancelled' }, node: null };
  if (Date.now() >= request.deadline) return { ok: false, outcome: { kind: 'deadline' }, node: null };
  const replica = pickReplica(
    routeCandidates(route.replicas, route.maxConcurrency, (id) => dataPlane.admission.load(id, request.lane ?? 'interactive')),
    input.tried,
  );
  if (!replica) return { ok: false, outcome: { kind: 'no_replica' }, node: null };
  input.tried.add(replica.assignmentId);
  input.onPicked();
  const node = replica.machineName;
  const labels = { workspace: route.workspaceId, model: route.model, deployment: route.name, node };

  // A replica's slots are counted where every call to its machine meets, its link holder: here when this instance
  // holds the machine's link, else the holder admits the forwarded invocation (docs/design.md section 5), and N
  // instances run on a replica exactly what one would.
  const admitsHere = dataPlane.holder.hasLocalStream(replica.machineId);
  let slot: HeldSlot;
  try {
    slot = admitsHere
      ? await dataPlane.admission.hold(replica.assignmentId, route.maxConcurrency, request.deadline, signal, request.lane ?? 'interactive')
      : dataPlane.admission.forwardedSlot(replica.assignmentId);
  } catch (error) {
    if (error instanceof SlotWaitAborted) return { ok: false, outcome: { kind: error.reason === 'deadline' ? 'deadline' : 'cancelled' }, node };
    throw error;
  }
  const invocationId = newId('invocation');
  // A streamed answer is paced to its client; one that is not is held whole (bounded by the budget) and needs none.
  const queue = new FrameQueue(
    request.stream ? { budget: dataPlane.budget, window: config.relayWindowBytes, stallMs: config.relayClientStallMs } : { budget: dataPlane.budget },
  );
  let dispatchedAt = performance.now();
  let queueMs = slot.queueMs;
  const giveUp = (outcome: AttemptOutcome, reason: string): Attempt => {
    queue.close();
    slot.release();
    // Best effort: the node may be gone, and the invocation dies with its deadline there anyway.
    dataPlane.holder.cancel(invocationId, replica.machineId, reason);
    dataPlane.holder.release(invocationId);
    // A cancellation, or a replica refusing work while it drains, is no failure of the runtime.
    const refused = outcome.kind === 'error' && outcome.code === REPLICA_DRAINING;
    if (outcome.kind !== 'cancelled' && !refused) metrics.runtimeFailures.inc(labels);
    return { ok: false, outcome, node };
  };
  // A holder elsewhere may keep the invocation waiting for a slot: cancelled or past its deadline, it stops waiting.
  const stopWaiting = () => dataPlane.holder.cancel(invocationId, replica.machineId, 'cancelled');
  input.until.addEventListener('abort', stopWaiting, { once: true });
  try {
    await dataPlane.holder.dispatch(
      {
        invocationId,
        workloadId: input.workloadId,
        assignmentId: replica.assignmentId,
        path: request.path,
        body: input.body,
        deadline: request.deadline,
        idempotencyKey: request.idempotencyKey,
        stream: request.stream,
      },
      replica.machineId,
      queue,
      { concurrency: route.maxConcurrency, lane: request.lane ?? 'interactive' },
    );
  } catch (error) {
    if (signal.aborted) return giveUp({ kind: 'cancelled' }, 'cancelled');
    if (input.until.aborted) return giveUp({ kind: 'deadline' }, 'deadline_exceeded');
    return giveUp({ kind: 'dispatch_failed', message: error instanceof Error ? error.message : String(error) }, 'dispatch_failed');
  } finally {
    input.until.removeEventListener('abort', stopWaiting);
  }
  // A holder elsewhere answers once it admitted the invocation: the wait was for one of the replica's slots there.
  if (!admitsHere) {
    const now = performance.now();
    queueMs = now - dispatchedAt;
    dispatchedAt = now;
  }
  metrics.queueTime.observe(labels, queueMs / 1000);

  // The node has until the ack timeout to show it got the invoke (its `accept` frame), then the runtime has until
  // the deadline.
  const ackBy = Date.now() + config.invokeAckTimeoutMs;
  let acked = false;
  const frames: Frame[] = [];
  while (!bodyStarted(frames)) {
    const item: QueueItem | null = await queue.next(input.until, acked ? undefined : ackBy);
    if (!item) {
      if (signal.aborted) return giveUp({ kind: 'cancelled' }, 'cancelled');
      if (input.until.aborted) return giveUp({ kind: 'deadline' }, 'deadline_exceeded');
      return giveUp({ kind: 'node_timeout' }, 'node_timeout');
    }
    acked = true;
    if (item.kind === 'failed') return giveUp({ kind: 'error', code: item.code, message: item.message }, item.code);
    for (const frame of item.frames) if (frame.t !== 'accept') frames.push(frame);
  }
  const headIndex = frames.findIndex((f) => f.t === 'head');
  const head = frames[headIndex];
  if (head?.t !== 'head') {
    const error = frames.find((f) => f.t === 'error');
    if (error?.t === 'error') return giveUp({ kind: 'error', code: error.code, message: error.message }, error.code);
    return giveUp({ kind: 'error', code: 'runtime_error', message: 'no response head' }, 'runtime_error');
  }
  if (head.status >= 500) return giveUp({ kind: 'runtime_status', status: head.status }, 'runtime_error');
  // The answer goes out under the API's origin: a runtime serving anything but JSON or SSE (a page, a script)
  // failed, like one answering 5xx, before a byte of it reached the client.
  const contentType = relayableContentType(head.contentType);
  if (contentType === null) {
    return giveUp(
      { kind: 'error', code: 'unsupported_content_type', message: 'the runtime answered with a content type the API does not relay' },
      'unsupported_content_type',
    );
  }
  // Broken before its first body byte: nothing reached the client either.
  const first = frames.slice(headIndex + 1).find((f) => f.t !== 'data' || f.d.length > 0);
  if (first?.t === 'error') return giveUp({ kind: 'error', code: first.code, message: first.message }, first.code);
  // Relayed rebuilt from what was parsed, never as the runtime wrote it.
  return { ok: true, head: { ...head, contentType }, rest: frames.slice(headIndex + 1), queue, replica, invocationId, slot, queueMs, dispatchedAt };
}

/** The attempt holds until the first bytes of the body (or the end, or an error): then the answer can start. */
function bodyStarted(frames: readonly Frame[]): boolean {
  const at = frames.findIndex((f) => f.t === 'head');
  if (at < 0) return frames.some((f) => f.t === 'error' || f.t === 'end');
  for (let i = at + 1; i < frames.length; i += 1) {
    const frame = frames[i]!;
    if (frame.t !== 'data' || frame.d.length > 0) return true;
  }
  return false;
}
