/** A routable replica as the router sees it at the moment of the decision. */
export interface RouteCandidate {
  assignmentId: string;
  machineId: string;
  /** Invocations running on the replica (this instance's view). */
  active: number;
  /** Invocations waiting for a slot on the replica. */
  queued: number;
  concurrency: number;
  /** The model is loaded and has served recently. */
  warm: boolean;
}

/**
 * The candidates of one pick: each replica with this instance's load of it and the deployment's concurrency.
 * Warmth is what the replica's agent reported, never assumed.
 */
export function routeCandidates<R extends Pick<RouteCandidate, 'assignmentId' | 'machineId' | 'warm'>>(
  replicas: readonly R[],
  concurrency: number,
  loadOf: (assignmentId: string) => Pick<RouteCandidate, 'active' | 'queued'>,
): Array<R & RouteCandidate> {
  return replicas.map((replica) => ({ ...replica, ...loadOf(replica.assignmentId), concurrency }));
}

/**
 * Picks the replica for one invocation (docs/design.md section 5, step 2): least expected queue delay
 * ((active + queued + 1) / concurrency), then warm, then the lowest id. Pure and deterministic.
 */
export function pickReplica<C extends RouteCandidate>(candidates: readonly C[], exclude: ReadonlySet<string> = new Set()): C | null {
  let best: C | null = null;
  let bestDelay = Infinity;
  for (const candidate of candidates) {
    if (exclude.has(candidate.assignmentId)) continue;
    const delay = (candidate.active + candidate.queued + 1) / Math.max(1, candidate.concurrency);
    if (
      best === null ||
      delay < bestDelay ||
      (delay === bestDelay && candidate.warm && !best.warm) ||
      (delay === bestDelay && candidate.warm === best.warm && candidate.assignmentId < best.assignmentId)
    ) {
      best = candidate;
      bestDelay = delay;
    }
  }
  return best;
}

/**
 * Whether the `n`-th request (from 0) of a deployment goes to its canary at `weight` percent: exactly `weight` of
 * every 100 consecutive requests, spread evenly (10 %: the 10th, 20th, ...), so a canary's share is what its weight
 * says from the first requests on, not only on average. Pure.
 */
export function canaryTurn(n: number, weight: number): boolean {
  return Math.floor(((n + 1) * weight) / 100) > Math.floor((n * weight) / 100);
}
