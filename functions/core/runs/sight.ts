import type { MachineLiveness } from '../../../shared/contracts/machine.js';
import { workerTransition, type RunState, type StateEvent } from './states.js';

/** The message of a worker failed because its machine is lost: the failure policy reads it as `machine-down`. */
export const MACHINE_DOWN = 'its machine is down';

/** A placed worker not final nor failed: what losing sight of its machine moves. */
const MOVABLE: ReadonlySet<RunState> = new Set(['pending', 'preparing', 'pulling', 'ready-to-start', 'starting', 'running', 'stale', 'down']);

/**
 * The controller's moves of a worker that holds a reservation on a machine, by that machine's liveness as the fleet
 * judges it (`machineLiveness`, the database's clock), each an event, in order:
 * - `ready` or `pending`: none. A worker sight was lost of waits for its agent, which re-adopts it or reports it
 *   gone (`machineAnswered`).
 * - `stale`: a worker not yet lost becomes `stale`, keeping its reservation.
 * - `down`: it becomes `down` (through `stale`), keeping its reservation; then, at the point where the machine's
 *   replicas are replaced (`isLost`), it fails with `MACHINE_DOWN` and its run's failure policy applies. While
 *   replacement is paused (`paused`: so many machines silent at once is likely a partition), it stays `down`.
 * - `revoked`, or no such machine: it will never answer, so it fails as from `down`, paused or not, as a revoked
 *   machine's replicas are retired at once.
 * A final worker, and one failed waiting for its restart, are not moved. Pure.
 */
export function sightMoves(input: {
  worker: string;
  state: RunState;
  machine: { name: string; liveness: MachineLiveness } | null;
  paused: string | null;
}): StateEvent[] {
  const { worker, machine } = input;
  const liveness = machine?.liveness ?? 'revoked';
  if (liveness === 'ready' || liveness === 'pending') return [];
  if (!MOVABLE.has(input.state)) return [];
  const name = machine ? `machine ${machine.name}` : 'its machine';
  const steps: Array<[RunState, string]> = [['stale', `sight of ${name} is lost`]];
  if (liveness !== 'stale') steps.push(['down', `${name} is ${liveness === 'down' ? 'declared down' : 'revoked'}`]);
  if (liveness !== 'stale' && (liveness !== 'down' || input.paused === null)) {
    steps.push(['failed', `${MACHINE_DOWN}: ${name} is ${liveness === 'down' ? 'down and its replicas are replaced' : 'revoked'}`]);
  }
  const events: StateEvent[] = [];
  let at = input.state;
  for (const [to, reason] of steps) {
    if (at === to || (at === 'down' && to === 'stale')) continue;
    const move = workerTransition(worker, at, to, reason, 'controller');
    // Every step above is one the controller may take from where the previous left the worker.
    if ('refused' in move) throw new Error(move.refused);
    events.push(move.event);
    at = to;
  }
  return events;
}
