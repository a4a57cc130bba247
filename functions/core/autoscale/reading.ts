import type { AutoscaleMetric } from '../../../shared/contracts/autoscale.js';

/** One replica of the deployment as a sample saw it. */
export interface ReplicaSample {
  /** Its machine missed its heartbeats: what it last reported is old, so it counts for nothing. */
  machineStale: boolean;
  ready: boolean;
  queueDepth: number;
  inFlight: number;
}

/** The deployment at one moment: its replicas, its TTFT and how many requests it took since the sample before. */
export interface LoadSample {
  /** Epoch ms, on the control plane's clock. */
  at: number;
  replicas: readonly ReplicaSample[];
  /** Null while no request finished its first token in the sample's interval. */
  ttftP95Ms: number | null;
  /** Requests started since the previous sample. */
  requests: number;
  /**
   * Requests the control plane accepted that no replica runs or queues yet (held for a slot or for a replica to
   * start): they wait for the deployment, not for one replica. Absent: 0.
   */
  waiting?: number;
}

/** What one sample says about the load, against one metric. */
export interface Reading {
  at: number;
  /** Replicas whose report counts: ready, on a machine that is not stale, with sound numbers. */
  serving: number;
  /** A counted replica has work queued or running. */
  busy: boolean;
  /** A request started in the sample's interval (a count that is not a plain 0 counts as one). */
  requested: boolean;
  /** The metric's value: the per-replica average over `serving`, or the TTFT p95. Null when `missing` says why. */
  value: number | null;
  /** The load in the target's units, `serving` x `value`: over the target it is the replicas the load wants. */
  load: number | null;
  missing: string | null;
}

const sound = (n: number) => Number.isFinite(n) && n >= 0;

/** What `sample` says about the load measured by `metric`. Pure. */
export function readSample(sample: LoadSample, metric: AutoscaleMetric): Reading {
  const counted = sample.replicas.filter((r) => !r.machineStale && r.ready && sound(r.queueDepth) && sound(r.inFlight));
  const serving = counted.length;
  const held = sample.waiting ?? 0;
  const waiting = sound(held) ? held : 0;
  const base = { at: sample.at, serving, busy: waiting > 0 || counted.some((r) => r.queueDepth + r.inFlight > 0), requested: sample.requests !== 0 };
  const missing = (why: string): Reading => ({ ...base, value: null, load: null, missing: why });
  if (sample.replicas.length > 0 && sample.replicas.every((r) => r.machineStale)) return missing('every machine of it is stale');
  if (serving === 0) return missing('no ready replica reports');
  if (metric === 'ttftP95Ms') {
    const ttft = sample.ttftP95Ms;
    if (ttft === null || !sound(ttft)) return missing('no TTFT measured (no request finished)');
    return { ...base, value: ttft, load: serving * ttft, missing: null };
  }
  // Held requests wait for the deployment as a whole: they are its queue, and in flight in it (as Knative counts a
  // request queued at its activator), so that a deployment whose slots are all taken still reads its whole load.
  const load = counted.reduce((sum, r) => sum + (metric === 'queueDepthPerReplica' ? r.queueDepth : r.inFlight), waiting);
  return { ...base, value: load / serving, load, missing: null };
}
