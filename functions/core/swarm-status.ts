import type { DeploymentStatus } from '../../shared/contracts/deployment.js';
import type { SwarmStatus } from '../../shared/contracts/swarm.js';

/**
 * A swarm's status from its deployment's (derived from the fleet on every read), or `missing` when it has no live
 * deployment. Degraded first: a failed or unplaceable replica is news whatever else holds; then asleep (scaled to
 * zero: desired is 0 until a request wakes it), stopped (0 replicas wanted), ready once every wanted replica serves,
 * else creating. Pure.
 */
export function swarmStatus(status: Pick<DeploymentStatus, 'desired' | 'ready' | 'degraded' | 'asleep'> | undefined): SwarmStatus {
  if (!status) return 'missing';
  if (status.degraded) return 'degraded';
  if (status.asleep) return 'asleep';
  if (status.desired === 0) return 'stopped';
  return status.ready >= status.desired ? 'ready' : 'creating';
}
