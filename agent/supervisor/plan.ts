import type { Assignment } from '../../shared/contracts/desired.js';
import type { RuntimeState } from '../../shared/contracts/heartbeat.js';

/** What the planner needs to know of a runtime the supervisor manages. */
export interface ManagedView {
  assignmentId: string;
  deploymentGeneration: number;
  state: RuntimeState;
  /** True while a launch, restart or retirement of this runtime is in progress. */
  busy: boolean;
  restarts: number;
  /** Epoch ms before which a failed runtime is not restarted. */
  restartAfter: number | null;
  restartPolicy: Assignment['restartPolicy'];
}

export type SupervisorAction =
  | { type: 'launch'; assignment: Assignment }
  | { type: 'restart'; assignmentId: string }
  | { type: 'replace'; assignment: Assignment }
  | { type: 'retire'; assignmentId: string };

/** Whether the restart policy allows another restart after `restarts` so far. */
export function mayRestart(policy: Assignment['restartPolicy'], restarts: number): boolean {
  return policy.mode !== 'never' && restarts < policy.maxRestarts;
}

/** Backoff before restart number `restarts + 1`: doubles each time, capped at a minute. */
export function restartDelayMs(policy: Assignment['restartPolicy'], restarts: number): number {
  return Math.min(60_000, policy.backoffMs * 2 ** restarts);
}

/**
 * The supervisor's pure core: verified desired assignments against managed runtimes -> actions.
 * Runtimes whose work is in progress are left alone until it finishes.
 */
export function planSupervision(input: { desired: readonly Assignment[]; managed: readonly ManagedView[]; now: number }): SupervisorAction[] {
  const actions: SupervisorAction[] = [];
  const managed = new Map(input.managed.map((m) => [m.assignmentId, m]));
  const desired = new Map(input.desired.map((a) => [a.assignmentId, a]));
  for (const assignment of input.desired) {
    const current = managed.get(assignment.assignmentId);
    if (!current) actions.push({ type: 'launch', assignment });
    else if (current.busy) continue;
    else if (current.deploymentGeneration !== assignment.deploymentGeneration) actions.push({ type: 'replace', assignment });
    else if (
      current.state === 'failed' &&
      mayRestart(current.restartPolicy, current.restarts) &&
      current.restartAfter !== null &&
      input.now >= current.restartAfter
    ) {
      actions.push({ type: 'restart', assignmentId: current.assignmentId });
    }
  }
  for (const current of input.managed) {
    if (!desired.has(current.assignmentId) && !current.busy && current.state !== 'stopped') actions.push({ type: 'retire', assignmentId: current.assignmentId });
  }
  return actions;
}
