import { capacityOf, freeOn, machineRefusal, type CandidateMachine, type ResourceNeed, type Resources } from '../scheduler/place.js';

/**
 * A machine as the queue takes it: the workspace that enrolled it, and whether it is shared with the fleet's run
 * queue (docs/runs.md, "Sharing machines"): then runs of every workspace may place workers on it.
 */
export interface QueueMachine extends CandidateMachine {
  workspaceId: string;
  shared: boolean;
}

/**
 * One machine as the placement of runs sees it during one pass: its capacity and what is left of it, both as the
 * scheduler counts them (`capacityOf`, `freeOn`: replicas and workers share one accounting), what is left being taken
 * down as the pass reserves; why it takes nothing at all, if so; and the aged run it is held for, if any.
 */
export interface Host {
  id: string;
  /** The workspace that enrolled it; `shared`: runs of other workspaces may use it too. */
  workspaceId: string;
  shared: boolean;
  labels: Record<string, string>;
  capacity: Resources;
  free: Resources;
  unavailable: string | null;
  heldFor: string | null;
}

/** The fleet as a pass starts it, in machine id order: the order every tie between machines is broken by. */
export function hostsOf(machines: readonly QueueMachine[]): Host[] {
  return machines
    .map((machine) => ({
      id: machine.id,
      workspaceId: machine.workspaceId,
      shared: machine.shared,
      labels: machine.labels,
      capacity: capacityOf(machine.inventory),
      free: freeOn(machine),
      unavailable: machineRefusal(machine),
      heldFor: null,
    }))
    .sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

/**
 * How many workers reserving `need` fit in `room`, at most `cap`: the largest n for which the scheduler's
 * `resourceRefusal(room, n x need)` is null, memory per GPU aside (a filter, not a reservation).
 */
export function workersFitting(room: Resources, need: Required<ResourceNeed>, cap: number): number {
  let n = cap;
  if (need.gpus > 0) n = Math.min(n, Math.floor(room.gpus / need.gpus));
  if (need.memoryMiB > 0) n = Math.min(n, Math.floor(room.memoryMiB / need.memoryMiB));
  if (need.cores > 0) n = Math.min(n, Math.floor(room.cores / need.cores));
  return Math.max(0, n);
}

/** Takes `workers` x `need` from what is left of the host (negative `workers` gives it back). */
export function reserveOn(host: Host, need: Required<ResourceNeed>, workers: number): void {
  host.free.gpus -= workers * need.gpus;
  host.free.memoryMiB -= workers * need.memoryMiB;
  host.free.cores -= workers * need.cores;
}
