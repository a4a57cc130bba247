import type { FleetSnapshot } from '../fleet/snapshot.js';
import type { LoadSample, ReplicaSample } from './reading.js';

/** What the plane's workload records say of a deployment since its previous sample (functions/controller/autoscale.ts). */
export interface RequestCounts {
  /** Requests started since the previous sample. */
  requests: number;
  /** Requests accepted and not finished, on every instance: held, queued or running. */
  open: number;
  /** The TTFT p95 of the requests that finished since the previous sample; null when none did. */
  ttftP95Ms: number | null;
}

/**
 * A deployment's load at the snapshot's moment, as the autoscaler reads it: each of its stable set's desired
 * replicas with what its node last reported (in flight: every invocation the agent has on it, before and after the
 * runtime's response head; queue depth: the requests its engine says wait for a sequence slot, or where the engine
 * reports no metrics, the invocations still waiting for the runtime's response head), and, as `waiting`, the open
 * requests no replica reports (held by the plane for a slot or a replica). Every replica of it counts towards what is reported, retiring and canary ones too: they hold
 * open requests as well. A replica counts only on a machine that is `ready` (one stale, down or still pending says
 * nothing of now). Pure.
 */
export function deploymentSample(snapshot: FleetSnapshot, deploymentId: string, counts: RequestCounts): LoadSample {
  const replicas: ReplicaSample[] = [];
  let reported = 0;
  for (const machine of snapshot.machines) {
    for (const r of machine.runtimes) {
      if (r.deploymentId !== deploymentId) continue;
      reported += r.activeInvocations + r.queueDepth;
      if (!r.desired || r.track !== 'stable') continue;
      replicas.push({
        machineStale: machine.liveness !== 'ready',
        ready: r.routable,
        queueDepth: r.engine?.requestsWaiting ?? r.queueDepth,
        inFlight: r.activeInvocations + r.queueDepth,
      });
    }
  }
  return {
    at: snapshot.now.getTime(),
    replicas,
    ttftP95Ms: counts.ttftP95Ms,
    requests: counts.requests,
    waiting: Math.max(0, counts.open - reported),
  };
}
