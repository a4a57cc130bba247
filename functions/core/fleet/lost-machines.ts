import type { MachineLiveness } from '../../../shared/contracts/machine.js';

/** A replica on a `down` machine is lost: it no longer counts toward its set, so a replacement goes elsewhere. */
export const isLost = (liveness: MachineLiveness) => liveness === 'down';

/**
 * Why lost replicas are not replaced now, or null: when at least 2 of a workspace's enrolled machines (neither
 * revoked nor still pending) are silent (stale or down) and they are more than `fraction` of them, the control
 * plane more likely lost sight of them (a partition) than they all failed, and replacing them all would stampede
 * the rest of the fleet. Pure.
 */
export function replacementPause(machines: ReadonlyArray<{ liveness: MachineLiveness }>, fraction: number): string | null {
  let enrolled = 0;
  let silent = 0;
  for (const { liveness } of machines) {
    if (liveness === 'revoked' || liveness === 'pending') continue;
    enrolled += 1;
    if (liveness === 'stale' || liveness === 'down') silent += 1;
  }
  if (silent < 2 || silent <= fraction * enrolled) return null;
  return `replacement paused: ${silent} of ${enrolled} machines are silent; likely a partition, not failures`;
}
