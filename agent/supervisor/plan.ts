import { canonicalize } from '../../shared/canonical.js';
import type { Assignment } from '../../shared/contracts/desired.js';
import type { RuntimeState } from '../../shared/contracts/heartbeat.js';
import { mayRestart } from '../../shared/restart-policy.js';

export { mayRestart };

/** What the planner needs to know of a runtime the supervisor manages. */
export interface ManagedView {
  /** The assignment the runtime runs under now. */
  assignment: Assignment;
  state: RuntimeState;
  /** True while a launch, restart, replacement or retirement of this runtime is in progress. */
  busy: boolean;
  /** True while that work is a launch that has not reached ready yet: it can be aborted at once. */
  launching: boolean;
  restarts: number;
  /** Epoch ms before which a failed runtime is not restarted; null when it is not to be restarted (a refused launch). */
  restartAfter: number | null;
}

export type SupervisorAction =
  | { type: 'launch'; assignment: Assignment }
  /** Same template, other fields changed (generation, startup, restart policy): taken over in place, no restart. */
  | { type: 'update'; assignment: Assignment }
  | { type: 'restart'; assignmentId: string }
  /** The template changed (or the runtime was stopped): it is drained, stopped and launched again from the assignment. */
  | { type: 'replace'; assignment: Assignment }
  /** A launch that is no longer wanted as it is (retired, or its template changed): its process stops at once. */
  | { type: 'abort'; assignmentId: string }
  | { type: 'retire'; assignmentId: string };

/** Backoff before restart number `restarts + 1`: doubles each time, capped at a minute. */
export function restartDelayMs(policy: Assignment['restartPolicy'], restarts: number): number {
  return Math.min(60_000, policy.backoffMs * 2 ** restarts);
}

/**
 * The supervisor's pure core: verified desired assignments against managed runtimes -> actions.
 *
 * A runtime is replaced only when its template (model, runtime, artifact, resources) changed; any other change,
 * a generation bump above all, is taken over in place. Work in progress is left to finish, except a launch
 * that is no longer wanted as it is: that one is aborted, and the next plan replaces or retires what is left.
 */
export function planSupervision(input: { desired: readonly Assignment[]; managed: readonly ManagedView[]; now: number }): SupervisorAction[] {
  const actions: SupervisorAction[] = [];
  const managed = new Map(input.managed.map((m) => [m.assignment.assignmentId, m]));
  const desired = new Set(input.desired.map((a) => a.assignmentId));
  for (const assignment of input.desired) {
    const current = managed.get(assignment.assignmentId);
    if (!current) {
      actions.push({ type: 'launch', assignment });
      continue;
    }
    const templateChanged = current.assignment.templateHash !== assignment.templateHash;
    // A runtime stopped while desired (its launch was aborted, and the change that aborted it undone) starts anew.
    if (templateChanged || (current.state === 'stopped' && !current.busy)) {
      if (!current.busy) actions.push({ type: 'replace', assignment });
      else if (current.launching) actions.push({ type: 'abort', assignmentId: assignment.assignmentId });
      continue;
    }
    if (canonicalize(current.assignment) !== canonicalize(assignment)) actions.push({ type: 'update', assignment });
    if (
      !current.busy &&
      current.state === 'failed' &&
      mayRestart(assignment.restartPolicy, current.restarts) &&
      current.restartAfter !== null &&
      input.now >= current.restartAfter
    ) {
      actions.push({ type: 'restart', assignmentId: assignment.assignmentId });
    }
  }
  for (const current of input.managed) {
    const assignmentId = current.assignment.assignmentId;
    if (desired.has(assignmentId)) continue;
    if (!current.busy) actions.push({ type: 'retire', assignmentId });
    else if (current.launching) actions.push({ type: 'abort', assignmentId });
  }
  return actions;
}

/** In-flight invocations of one runtime, as the invocation runner counts them. */
export interface RuntimeLoad {
  /** Handed to the runtime, no response head yet. */
  queued: number;
  /** Response head arrived, the answer is streaming. */
  active: number;
  /** Epoch ms when an invocation last finished after the runtime answered it; null if none did. */
  lastServedAt: number | null;
  /** The latest deadline of the invocations in flight; null when none is. */
  latestDeadline: number | null;
}

export const IDLE: RuntimeLoad = { queued: 0, active: 0, lastServedAt: null, latestDeadline: null };

/**
 * Until when a draining runtime waits for its in-flight invocations: never past `capMs`, nor past the latest
 * deadline among them (the runner gives each up at its deadline); at once when nothing is in flight.
 */
export function drainUntil(loads: readonly RuntimeLoad[], now: number, capMs: number): number {
  const deadlines = loads.filter((l) => l.queued + l.active > 0).map((l) => l.latestDeadline ?? now + capMs);
  if (deadlines.length === 0) return now;
  return Math.min(now + capMs, Math.max(now, ...deadlines));
}
