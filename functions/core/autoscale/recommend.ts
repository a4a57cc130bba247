import type { AutoscaleMetric, AutoscaleSpec } from '../../../shared/contracts/autoscale.js';

/**
 * Within this share of the target the measure is on target and the count holds: without a band, a load a hair
 * above a whole multiple of the target would add a replica, and the one after it take it away.
 */
const TOLERANCE = 0.1;

/** What one reading asks of the count: `wanted` replicas, which is a move `direction` from the current count. */
export interface Recommendation {
  wanted: number;
  direction: 'up' | 'down' | 'hold';
  /** Why it holds (null when it moves). */
  hold: string | null;
}

/**
 * The replicas a reading wants, against `current`. `load` is the reading's measure times its serving replicas, so
 * `load / target` (rounded up) is the count that brings the measure to the target: the summed queue depth or
 * in-flight count over the per-replica target, and for TTFT p95 the serving replicas scaled by how far it is
 * off target (as Kubernetes' HPA does). It is clamped to [max(1, minReplicas), maxReplicas]: this path never asks
 * for 0, only a deployment idle for `scaleDownAfterMs` goes to zero (decide.ts).
 *
 * The measure's side of the target gives the direction and `wanted` the size; they disagree only while replicas of
 * the count do not serve yet (or no longer do), and then it holds: an overloaded deployment whose new replicas are
 * still starting is not scaled down because its two serving replicas would take three, nor up past what is coming.
 * Pure.
 */
export function recommend(reading: { value: number; load: number }, policy: AutoscaleSpec, current: number): Recommendation {
  const target = policy.target.value;
  const ratio = reading.value / target;
  // The epsilons keep float noise (0.1 * 3 / 0.1, 4.4 / 4) from adding a replica or leaving the band.
  const wanted = Math.min(policy.maxReplicas, Math.max(1, policy.minReplicas, Math.ceil(reading.load / target - 1e-9)));
  if (Math.abs(ratio - 1) <= TOLERANCE + 1e-9) return { wanted: current, direction: 'hold', hold: `within ${TOLERANCE * 100} % of target` };
  if (ratio > 1) {
    if (wanted > current) return { wanted, direction: 'up', hold: null };
    return { wanted, direction: 'hold', hold: current >= policy.maxReplicas ? `at maxReplicas (${policy.maxReplicas})` : `${current} desired cover it` };
  }
  if (wanted < current) return { wanted, direction: 'down', hold: null };
  if (current > Math.max(1, policy.minReplicas)) return { wanted, direction: 'hold', hold: `${wanted} still wanted` };
  return { wanted, direction: 'hold', hold: policy.minReplicas > 0 ? `at minReplicas (${policy.minReplicas})` : 'at 1 replica: only idling takes it to zero' };
}

const round = (n: number) => Math.round(n * 10) / 10;

/** `queue depth 9 per replica (target 4)`, `TTFT p95 1200 ms (target 1000 ms)`: a reading for a reason. */
export function describeMeasure(metric: AutoscaleMetric, value: number, target: number): string {
  if (metric === 'ttftP95Ms') return `TTFT p95 ${round(value)} ms (target ${round(target)} ms)`;
  const what = metric === 'queueDepthPerReplica' ? 'queue depth' : 'in flight';
  return `${what} ${round(value)} per replica (target ${round(target)})`;
}
