import type { Assignment } from '../../../shared/contracts/desired.js';

/** A deployment's replica sets: the stable version's, and its canary's while it has one. */
export type Track = NonNullable<Assignment['track']>;

/**
 * The id the pure reconciler knows a replica set by: the deployment's id for its stable set, `<id>/canary` for
 * its canary, so that each set is reconciled on its own with the same rules (deployment ids never hold a `/`).
 */
export function replicaSetId(deploymentId: string, track: Track): string {
  return track === 'stable' ? deploymentId : `${deploymentId}/${track}`;
}

/** The deployment and track a replica set id names. */
export function replicaSetOf(setId: string): { deploymentId: string; track: Track } {
  const slash = setId.indexOf('/');
  return slash < 0 ? { deploymentId: setId, track: 'stable' } : { deploymentId: setId.slice(0, slash), track: setId.slice(slash + 1) as Track };
}
