import { newId } from '../../shared/ids.js';
import { serviceCtx, type Ports } from './ports.js';
import type { DeploymentRoute, RoutableReplica } from './routing.js';
import { recordWorkload, retakeOrphanedWorkload, workloadByKey, type WorkloadRow } from '../services/workloads.js';
import { abortAfter } from './abort-after.js';
import { answer, type Finish } from './answer.js';
import { tryReplica } from './attempt.js';
import type { InferenceRequest } from './request.js';
import type { InferenceError, InferenceResult } from './result.js';
import { decideRetry, type AttemptFailure } from './retry.js';
import { modelAllowed } from '../core/token-rules.js';
import { canaryTurn } from '../core/scheduler/route.js';
import { onTrack } from './tracks.js';
import { wakeDeployment } from './wake.js';
import { tokenShareOf } from './admission.js';

const notFound = (model: string): InferenceError => ({
  kind: 'not_found',
  code: 'model_not_found',
  message: `The model \`${model}\` does not exist or you do not have access to it.`,
});

/** The status the workload's record keeps for how it ended (the one `/v1` answers; null: the client left). */
const RECORDED_STATUS: Record<InferenceError['kind'], number | null> = {
  not_found: 404,
  capacity: 429,
  unavailable: 503,
  deadline: 504,
  cancelled: null,
  bad_gateway: 502,
  conflict: 409,
};

/**
 * Executes one canonical workload (docs/design.md section 5): admission, routing with retries before the first
 * byte (and a hold while the deployment's replicas start), dispatch over the node's stream, relay of the
 * runtime's bytes in batches (never re-serialised), cancellation, deadlines, idempotency and metrics.
 * Unexpected faults throw; every answer the client should see is in the result.
 */
export async function executeInference(ports: Ports, request: InferenceRequest): Promise<InferenceResult> {
  const { dataPlane, config, metrics } = ports;
  const ctx = serviceCtx(ports, request.actor.tokenId);
  // The workload counts as held only while this instance's lease does (a no-op on Node, whose timer renews it).
  await ports.instanceLease.touch(ports.store.db);
  await dataPlane.routing.fresh();
  // A model outside the token's allow-list answers exactly as one that does not exist: nothing leaks.
  let route = modelAllowed(request.actor.models, request.model) ? dataPlane.routing.resolve(request.actor.workspaceId, request.model) : undefined;
  if (!route) return { ok: false, error: notFound(request.model) };
  if (route.asleep) {
    await wakeDeployment(ports, route);
    route = dataPlane.routing.resolve(request.actor.workspaceId, request.model) ?? route;
  }
  const deploymentId = route.id;
  const track = request.track ?? (canaryTurn(dataPlane.routing.turn(deploymentId), route.canaryWeight) ? 'canary' : 'stable');
  const pinned = request.track !== undefined;
  const labels = { workspace: route.workspaceId, model: route.model, deployment: route.name };

  // A request held for a replica counts here too: a flood while replicas start gets 429, not an unbounded wait.
  // And one token holds at most its share of that queue: the others still get in (docs/security.md, bounds).
  const tokenId = request.actor.tokenId;
  const tokenLimit = tokenShareOf(route.queueCapacity, config.admissionTokenShare);
  const refused = dataPlane.admission.enter(deploymentId, route.queueCapacity, tokenId, tokenLimit);
  if (refused) {
    metrics.admissionRejected.inc(labels);
    const error: InferenceError =
      refused === 'token'
        ? {
            kind: 'capacity',
            code: 'token_concurrency_exceeded',
            message: `this token already has ${tokenLimit} requests queued or running on ${route.name}, its share of the deployment's capacity; retry later`,
            retryAfterS: 1,
          }
        : { kind: 'capacity', code: 'capacity_exceeded', message: `${route.name} is at capacity; retry later`, retryAfterS: 1 };
    return { ok: false, error };
  }

  let workloadId = newId('workload');
  const row: WorkloadRow = {
    id: workloadId,
    workspaceId: request.actor.workspaceId,
    deploymentId,
    kind: request.kind,
    idempotencyKey: request.idempotencyKey,
    deadline: new Date(request.deadline),
    state: 'running',
    instanceId: ports.instanceId,
    createdAt: new Date(),
    // Usage is counted per token and the model as asked (docs/operations.md, "Usage").
    tokenId: request.actor.tokenId,
    model: request.model,
    dataClass: route.dataClass,
  };
  let finished = false;
  let attempts = 0;
  let machineId: string | null = null;
  let served: { versionId: string | null; track: string } = { versionId: null, track };
  /** The machine name of the last attempt that failed, for the node label of retries and cancellations. */
  let lastNode: string | null = null;
  let unsubscribeCancel = () => {};
  /** The request's one deadline timer, from the moment it runs. */
  let deadline: { signal: AbortSignal; clear(): void } | null = null;
  const finish: Finish = (state, statusCode, errorCode, answered) => {
    if (finished) return;
    finished = true;
    deadline?.clear();
    dataPlane.admission.leave(deploymentId, tokenId);
    dataPlane.live.delete(workloadId);
    unsubscribeCancel();
    dataPlane.workloads.put(workloadId, { ...row, ...answered, ...served, state, machineId, attempts, statusCode, errorCode, finishedAt: new Date() });
  };

  if (request.idempotencyKey) {
    // The insert is the guard, so it is written before anything runs; the rest of the record is written behind.
    let fresh: boolean;
    let retaken: string | null = null;
    try {
      fresh = await recordWorkload({ ctx, input: row });
      // A key whose workload died with its instance (known not to have finished) runs again, once, under its id.
      if (!fresh)
        retaken = await retakeOrphanedWorkload({
          ctx,
          input: { tokenId: request.actor.tokenId, idempotencyKey: request.idempotencyKey, deadline: row.deadline },
        });
    } catch (error) {
      dataPlane.admission.leave(deploymentId, tokenId);
      throw error;
    }
    if (retaken) row.id = workloadId = retaken;
    else if (!fresh) {
      dataPlane.admission.leave(deploymentId, tokenId);
      const previous = await workloadByKey({ ctx, input: { tokenId: request.actor.tokenId, idempotencyKey: request.idempotencyKey } });
      return {
        ok: false,
        error: {
          kind: 'conflict',
          code: 'idempotency_key_reused',
          message: `Idempotency-Key already used by workload ${previous?.id ?? 'unknown'} (${previous?.state ?? 'unknown'}); it never executes twice`,
          ...(previous ? { workloadId: previous.id } : {}),
        },
      };
    }
  } else {
    dataPlane.workloads.put(workloadId, row);
  }

  // A cancel API call or a client disconnect both end up here.
  const cancelled = new AbortController();
  request.signal.addEventListener('abort', () => cancelled.abort('client disconnected'), { once: true });
  // Cancelled, or out of time: every wait of the request (slot, replica, node, runtime) ends on this one signal.
  deadline = abortAfter(cancelled.signal, request.deadline - Date.now());
  const until = deadline.signal;
  dataPlane.live.set(workloadId, { cancel: (reason) => cancelled.abort(reason) });
  // The cancel API may be answered by another instance: it reaches this one through the bus.
  unsubscribeCancel = ports.bus.subscribe(`workload:${workloadId}`, (message) => {
    if (message.type === 'cancel-workload') cancelled.abort('cancelled by API');
  });

  let body = JSON.stringify({ ...request.body, model: route.model });
  const tried = new Set<string>();
  let failures = 0;
  let lastFailure: AttemptFailure | null = null;
  let heldMs = 0;
  const fail = (error: InferenceError): InferenceResult => {
    finish(error.kind === 'cancelled' ? 'cancelled' : 'failed', RECORDED_STATUS[error.kind], error.code);
    if (error.kind === 'cancelled') metrics.cancellations.inc({ ...labels, node: lastNode ?? 'none' });
    return { ok: false, error };
  };
  try {
    for (;;) {
      const view = onTrack(route, track, pinned);
      const attempt = await tryReplica({
        ports,
        route: view,
        request,
        workloadId,
        body,
        tried,
        signal: cancelled.signal,
        until,
        onPicked: () => {
          attempts += 1;
          if (attempts > 1) metrics.retries.inc({ ...labels, node: lastNode ?? 'none' });
        },
      });
      if (attempt.ok) {
        machineId = attempt.replica.machineId;
        served = { versionId: attempt.replica.versionId, track: attempt.replica.track };
        return await answer({ ports, route, request, workloadId, started: attempt, heldMs, cancelled, until, finish });
      }
      if (attempt.node) lastNode = attempt.node;
      const decision = decideRetry(attempt.outcome, {
        deployment: route.name,
        failures,
        maxAttempts: config.maxAttempts,
        startingReplicas: view.startingReplicas,
        lastFailure,
      });
      if (decision.next === 'stop') return fail(decision.error);
      if (decision.next === 'retry') {
        if (decision.failure) {
          failures += 1;
          lastFailure = decision.failure;
        }
        continue;
      }
      const heldAt = performance.now();
      const held = await holdForReplica(ports, route, { until, usable: (r) => !tried.has(r.assignmentId) && (!pinned || r.track === track) });
      heldMs += performance.now() - heldAt;
      // The next attempt ends the request: it finds it cancelled or past its deadline.
      if (held === 'aborted') continue;
      // Deleted while the request waited (a deployment of the same name since is another one).
      if (!held || held.id !== deploymentId) return fail(notFound(request.model));
      // A spec change may have moved the deployment to another model while the request waited.
      if (held.model !== route.model) body = JSON.stringify({ ...request.body, model: held.model });
      route = held;
    }
  } catch (error) {
    finish('failed', 500, 'internal');
    throw error;
  }
}

/**
 * Holds the request until routing has a replica of the deployment it has not tried (or the deployment is gone,
 * or asks for none), under the deadline and cancellable: the route as routing has it then, or `aborted`.
 */
async function holdForReplica(
  ports: Ports,
  route: DeploymentRoute,
  opts: { until: AbortSignal; usable: (replica: RoutableReplica) => boolean },
): Promise<DeploymentRoute | undefined | 'aborted'> {
  try {
    return await ports.dataPlane.routing.waitForReplica(route.workspaceId, route.name, { signal: opts.until, usable: opts.usable });
  } catch (error) {
    if (opts.until.aborted) return 'aborted';
    throw error;
  }
}
