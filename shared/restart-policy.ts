import type { RestartPolicy } from './contracts/desired.js';

/**
 * Whether the restart policy allows another restart after `restarts` so far. The agent restarts a failed runtime
 * by it; the control plane tells by it, from the reported restarts and the assignment's policy, a runtime that
 * failed for good from one that waits for its next restart.
 */
export function mayRestart(policy: RestartPolicy, restarts: number): boolean {
  return policy.mode !== 'never' && restarts < policy.maxRestarts;
}
