import type { WorkerReportedState } from '../../../shared/contracts/worker.js';
import { machineAnswered, workerTransition, type RunState, type StateEvent } from './states.js';

const PAST_START: ReadonlySet<RunState> = new Set(['starting', 'running', 'completed', 'failed']);
const BEFORE_START: ReadonlySet<RunState> = new Set(['pending', 'preparing', 'pulling', 'ready-to-start']);

/** What the agent said of a worker's state, as an event's reason. */
function reportedReason(state: WorkerReportedState, exitCode: number | null, message: string | null): string {
  if (message) return message;
  if (state === 'completed') return 'exited 0';
  if (state === 'failed' && exitCode !== null) return `exited with code ${exitCode}`;
  return `its agent reports it ${state}`;
}

/**
 * The events a worker's report implies, from the state the control plane holds: one move of its agent, or the
 * moves it went through between two reports. An agent reports what it sees, and several steps may pass between two
 * heartbeats: a worker pending here may be reported running. Steps it must have gone through are filled in, each an
 * event (a worker told `start` that its agent started was moved to `starting` by that decision, the controller's);
 * a report no such path reaches (a start the controller never decided, a final state) is refused with why. A
 * worker on a machine sight was lost of is re-adopted or found gone (`machineAnswered`). Pure.
 */
export function reportedMoves(input: {
  id: string;
  from: RunState;
  reported: WorkerReportedState;
  phase: 'prepare' | 'start';
  exitCode: number | null;
  message: string | null;
}): { events: StateEvent[] } | { refused: string } {
  const { id, from, reported } = input;
  if (from === reported) return { events: [] };
  const reason = reportedReason(reported, input.exitCode, input.message);
  if (from === 'stale' || from === 'down') {
    const answered = machineAnswered(id, from, reported);
    return 'refused' in answered ? answered : { events: [{ ...answered.event, reason }] };
  }
  const direct = workerTransition(id, from, reported, reason, 'agent');
  if ('event' in direct) return { events: [direct.event] };
  const steps: Array<[RunState, string, 'agent' | 'controller']> = [];
  if (from === 'pending') steps.push(['preparing', 'taken by its agent', 'agent']);
  if (PAST_START.has(reported) && input.phase === 'start' && BEFORE_START.has(from)) {
    if (from !== 'ready-to-start') steps.push(['ready-to-start', 'prepared by its agent', 'agent']);
    steps.push(['starting', 'started: its run does not wait for a gang', 'controller']);
  }
  const events: StateEvent[] = [];
  let at: RunState = from;
  for (const [to, why, origin] of [...steps, [reported, reason, 'agent'] as const]) {
    if (at === to) continue;
    const move = workerTransition(id, at, to, why, origin);
    if ('refused' in move) return direct;
    events.push(move.event);
    at = to;
  }
  return { events };
}
