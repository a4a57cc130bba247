import type { DeploymentRoute, Track } from './routing.js';

/**
 * The route as one request sees it once its replica set is chosen: that set's replicas (and those of its set
 * still starting). A request not pinned to a set falls back to every replica when its set has none serving, so a
 * canary that is not ready yet, or a stable set still rolling, never fails a request the other set could serve.
 * Pinned (the benchmark gate measures the canary alone), it waits for its set or fails. Pure.
 */
export function onTrack(route: DeploymentRoute, track: Track, pinned: boolean): DeploymentRoute {
  const mine = route.replicas.filter((r) => r.track === track);
  const startingMine = track === 'canary' ? route.startingCanary : route.startingReplicas - route.startingCanary;
  if (pinned) return { ...route, replicas: mine, startingReplicas: startingMine };
  if (mine.length > 0) return { ...route, replicas: mine };
  return route;
}
