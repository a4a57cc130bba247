import type { RunState } from './states.js';

/** A worker of an admitted run, as the start decision needs it. */
export interface StartingWorker {
  name: string;
  /** Null while it has no machine (a worker being placed again). */
  machineId: string | null;
  state: RunState;
}

export type StartDecision =
  /** Move these workers from ready-to-start to starting (the controller's decision; the agents start them). */
  | { action: 'start'; workers: string[]; reason: string }
  | { action: 'wait'; reason: string }
  /** Release every worker's reservation and put the run back in the queue, with this reason. */
  | { action: 'release'; reason: string };

const PAST_BARRIER: ReadonlySet<RunState> = new Set(['starting', 'running', 'completed']);

function duration(ms: number): string {
  if (ms % 3_600_000 === 0) return `${ms / 3_600_000} h`;
  if (ms % 60_000 === 0) return `${ms / 60_000} min`;
  return `${ms / 1000} s`;
}

/**
 * Which of a run's workers start now. Without a gang, each starts as soon as it is ready to start. A gang starts
 * only when every worker is placed and ready to start (or already past that, which a restarted controller may
 * find): then all start together. A gang not assembled `timeoutMs` after its admission (`assemblingSince`) is
 * released whole, with the workers that held it up in the reason, and goes back to the queue. Failures are not
 * this barrier's business: they go to the failure policy (`failure.ts`), which restarts a gang as a whole. Pure:
 * `now` is the caller's.
 */
export function startDecision(input: {
  workers: readonly StartingWorker[];
  gang: { timeoutMs: number } | null;
  assemblingSince: number;
  now: number;
}): StartDecision {
  const ready = input.workers.filter((w) => w.state === 'ready-to-start' && w.machineId !== null).map((w) => w.name);
  if (input.gang === null) {
    return ready.length > 0 ? { action: 'start', workers: ready, reason: 'ready to start' } : { action: 'wait', reason: 'no worker ready to start' };
  }
  const behind = input.workers.filter((w) => w.machineId === null || (w.state !== 'ready-to-start' && !PAST_BARRIER.has(w.state)));
  if (behind.length === 0) {
    return ready.length > 0
      ? { action: 'start', workers: ready, reason: `gang assembled: all ${input.workers.length} workers ready to start` }
      : { action: 'wait', reason: 'gang started' };
  }
  const lagging = behind
    .slice(0, 5)
    .map((w) => `${w.name} ${w.machineId === null ? 'unplaced' : w.state}`)
    .join(', ');
  const more = behind.length > 5 ? ` and ${behind.length - 5} more` : '';
  const status = `${behind.length} of ${input.workers.length} workers not ready to start (${lagging}${more})`;
  if (input.now - input.assemblingSince >= input.gang.timeoutMs) {
    return { action: 'release', reason: `gang did not assemble within ${duration(input.gang.timeoutMs)}: ${status}` };
  }
  return { action: 'wait', reason: `gang assembling: ${status}` };
}
