import type { WorkerAssignment } from '../../shared/contracts/desired.js';
import { MAX_MACHINE_WORKERS, type WorkerReport, type WorkerReportedState } from '../../shared/contracts/worker.js';

/** What the worker supervisor knows of one worker, as the plan sees it. */
export interface WorkerView {
  workerId: string;
  attempt: number;
  state: WorkerReportedState;
  /** A prepare, start or stop of it is in progress. */
  busy: boolean;
}

export type WorkerAction =
  | { type: 'prepare'; assignment: WorkerAssignment }
  | { type: 'start'; assignment: WorkerAssignment }
  | { type: 'replace'; assignment: WorkerAssignment }
  | { type: 'stop'; workerId: string };

/**
 * What to do to make the workers match the desired state. A worker is prepared when first assigned, started once
 * prepared and its phase says `start`, replaced (the old process stopped first) by a higher attempt, and stopped
 * when it leaves the desired state. Nothing else: a worker that ended is never restarted here (a restart comes as a
 * new attempt), and a lower attempt than the one held (an older state) changes nothing. Busy workers wait. Pure.
 */
export function planWorkers(desired: readonly WorkerAssignment[], managed: readonly WorkerView[]): WorkerAction[] {
  const actions: WorkerAction[] = [];
  const byId = new Map(managed.map((m) => [m.workerId, m]));
  const wanted = new Set<string>();
  for (const assignment of desired) {
    wanted.add(assignment.workerId);
    const m = byId.get(assignment.workerId);
    if (!m) actions.push({ type: 'prepare', assignment });
    else if (m.busy) continue;
    else if (assignment.attempt > m.attempt) actions.push({ type: 'replace', assignment });
    else if (assignment.attempt === m.attempt && assignment.phase === 'start' && m.state === 'ready-to-start') actions.push({ type: 'start', assignment });
  }
  for (const m of managed) if (!wanted.has(m.workerId) && !m.busy) actions.push({ type: 'stop', workerId: m.workerId });
  return actions;
}

/** The heartbeat's `workers`: every worker the supervisor knows, in id order, within the contract's bound. Pure. */
export function workerReports(reports: readonly WorkerReport[]): WorkerReport[] {
  return [...reports].sort((a, b) => (a.workerId < b.workerId ? -1 : a.workerId > b.workerId ? 1 : 0)).slice(0, MAX_MACHINE_WORKERS);
}

/** How a worker's process ended, as reported: exit 0 completes it, anything else fails it. Pure. */
export function exitReport(
  code: number | null,
  signal: NodeJS.Signals | null,
): { state: 'completed' | 'failed'; exitCode: number | null; message: string | null } {
  if (code === 0) return { state: 'completed', exitCode: 0, message: null };
  if (code !== null) return { state: 'failed', exitCode: code, message: `exited with code ${code}` };
  return { state: 'failed', exitCode: null, message: `killed by ${signal ?? 'a signal'}` };
}
