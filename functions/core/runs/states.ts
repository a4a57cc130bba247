import { PROCESS_NOT_FOUND } from '../../../shared/contracts/worker.js';
/**
 * The states of a run and of each of its workers. `pending`: waiting (a run in the queue; a worker for its agent to
 * take it, or for its restart); `preparing`, `pulling` (its files), `ready-to-start`, `starting`, `running`: as its
 * agent reports; `completed` (exit 0) and `failed`: final; `stale` and `down`: sight of its machine lost, then the
 * machine declared down. A worker keeps its reservation through `stale` and `down` until its machine says whether the
 * process still runs.
 */
export const RUN_STATES = ['pending', 'preparing', 'pulling', 'ready-to-start', 'starting', 'running', 'completed', 'failed', 'stale', 'down'] as const;
export type RunState = (typeof RUN_STATES)[number];

/** Who moves a state: the agent reports what it sees; the controller decides (starts, restarts, fails, loses sight). */
export type Origin = 'agent' | 'controller';

/** Every transition is an event with its reason; a run's own moves come from the controller or follow its workers. */
export interface StateEvent {
  subject: 'run' | 'worker';
  id: string;
  from: RunState;
  to: RunState;
  reason: string;
  origin: Origin | 'workers';
}

const FINAL: ReadonlySet<RunState> = new Set(['completed', 'failed']);
const LIVE: readonly RunState[] = ['preparing', 'pulling', 'ready-to-start', 'starting', 'running'];
/** What a machine coming back may report of a worker it was running: re-adopted as it is, or gone (`failed`). */
const REPORTABLE: readonly RunState[] = [...LIVE, 'completed', 'failed'];

type Table = Record<RunState, readonly RunState[]>;

/** A worker's transitions that its agent reports. */
const REPORTED: Table = {
  pending: ['preparing'],
  preparing: ['pulling', 'ready-to-start', 'failed'],
  pulling: ['ready-to-start', 'failed'],
  'ready-to-start': ['failed'],
  starting: ['running', 'completed', 'failed'],
  running: ['completed', 'failed'],
  completed: [],
  failed: [],
  stale: REPORTABLE,
  down: REPORTABLE,
};

/**
 * A worker's transitions that the controller decides: start it (at once, or all together for a gang), lose sight of
 * its machine, declare it down, send it back to waiting (released with its gang or its run, or restarted after a
 * failure), or fail it (its run failed or was cancelled).
 */
const DECIDED: Table = {
  pending: ['stale', 'failed'],
  preparing: ['stale', 'pending', 'failed'],
  pulling: ['stale', 'pending', 'failed'],
  'ready-to-start': ['starting', 'stale', 'pending', 'failed'],
  starting: ['stale', 'pending', 'failed'],
  running: ['stale', 'pending', 'failed'],
  completed: [],
  failed: ['pending'],
  stale: ['down', 'pending', 'failed'],
  down: ['pending', 'failed'],
};

/**
 * The event a worker's move from `from` to `to` produces, or why that move is refused (a final state, or a move
 * its origin may not make: an agent never starts a worker, the controller never says it runs).
 */
export function workerTransition(id: string, from: RunState, to: RunState, reason: string, origin: Origin): { event: StateEvent } | { refused: string } {
  const allowed = (origin === 'agent' ? REPORTED : DECIDED)[from];
  if (!allowed.includes(to)) {
    const why = FINAL.has(from) ? `${from} is final` : `the ${origin} does not move a worker from ${from} to ${to}`;
    return { refused: `worker ${id}: ${why}` };
  }
  return { event: { subject: 'worker', id, from, to, reason, origin } };
}

/**
 * A run's state from its workers' once it is admitted: `completed` when every worker exited 0; `down` when a worker's
 * machine is declared down, else `stale` when sight of one is lost; otherwise the least advanced of its workers,
 * a worker waiting (for its agent, or for its restart after a failure) counting as `preparing` and one completed as
 * `running`. Never `pending` (the queue's) nor `failed` (the failure policy's decision): the controller sets those.
 */
export function deriveRunState(workers: readonly { name: string; state: RunState }[]): { state: RunState; reason: string } {
  const count = (state: RunState) => workers.filter((w) => w.state === state).length;
  const first = (state: RunState) => workers.find((w) => w.state === state)!.name;
  if (count('completed') === workers.length) return { state: 'completed', reason: 'every worker exited 0' };
  if (count('down') > 0) return { state: 'down', reason: `worker ${first('down')}'s machine is down` };
  if (count('stale') > 0) return { state: 'stale', reason: `sight of worker ${first('stale')}'s machine is lost` };
  const live = workers.map((w) => (w.state === 'pending' || w.state === 'failed' ? 'preparing' : w.state));
  const state = LIVE[Math.min(...live.map((s) => LIVE.indexOf(s === 'completed' ? 'running' : s)))]!;
  const at = live.filter((s) => s === state).length;
  return { state, reason: `${at} of ${workers.length} workers ${state}` };
}

/**
 * A run's transitions. The controller moves it from `pending` (admitted, its workers placed) and back to it
 * (released: a gang that did not assemble, a run restarted), and fails it (its failure policy, a cancel); every
 * other move follows its workers (`deriveRunState`).
 */
export function runTransition(
  id: string,
  from: RunState,
  to: RunState,
  reason: string,
  origin: 'controller' | 'workers',
): { event: StateEvent } | { refused: string } {
  if (FINAL.has(from)) return { refused: `run ${id}: ${from} is final` };
  if (from === to) return { refused: `run ${id}: already ${from}` };
  const ok =
    origin === 'controller'
      ? to === 'failed' || to === 'pending' || (from === 'pending' && to === 'preparing')
      : from !== 'pending' && to !== 'pending' && to !== 'failed';
  if (!ok) return { refused: `run ${id}: ${origin === 'workers' ? 'its workers do' : 'the controller does'} not move a run from ${from} to ${to}` };
  return { event: { subject: 'run', id, from, to, reason, origin } };
}

/**
 * A worker on a machine that sight was lost of (`stale`, `down`), once the machine reports again: the state it
 * reports for the process (re-adopted), or `failed` with `process not found` when it has none, which releases the
 * worker's reservation and hands it to the failure policy.
 */
export function machineAnswered(id: string, from: 'stale' | 'down', reported: RunState | null): { event: StateEvent } | { refused: string } {
  if (reported === null) return workerTransition(id, from, 'failed', PROCESS_NOT_FOUND, 'agent');
  return workerTransition(id, from, reported, `re-adopted: its machine reports it ${reported}`, 'agent');
}
