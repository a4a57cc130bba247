import type { MachineLiveness } from '../../shared/contracts/machine.js';
import type { Inventory } from '../../shared/contracts/inventory.js';

export interface CandidateMachine {
  id: string;
  labels: Record<string, string>;
  liveness: MachineLiveness;
  cordoned: boolean;
  draining: boolean;
  inventory: Inventory;
  /** Models its agent reports loaded in a ready runtime. */
  warmModels: readonly string[];
  /** Invocations its runtimes report running or queued: the machine's observed load. */
  load: number;
  /** Resources already reserved by this machine's assignments. */
  reserved: { gpus: number; memoryMiB: number; assignments: number };
  /** Deployments already placed here (one replica per machine). */
  deploymentIds: ReadonlySet<string>;
  /**
   * Deployments whose replica failed for good here (an open mark), with why: none of their replicas is placed here
   * again until an operator clears the mark, so that a replica that fails everywhere ends unplaceable, never in a loop.
   */
  replicaFailures: ReadonlyMap<string, string>;
}

export interface PlacementRequest {
  deploymentId: string;
  model: string;
  selector: Record<string, string>;
  gpus: number;
  memoryMiB: number;
}

export interface PlacementDecision {
  machineId: string | null;
  /** Why each machine that was not picked was rejected, so every decision can explain itself. */
  rejected: Array<{ machineId: string; reason: string }>;
}

/** Memory a machine offers to runtimes: GPU memory, or host memory on unified-memory or GPU-less machines. */
export function machineMemoryMiB(inventory: Inventory): number {
  const discrete = inventory.gpus.filter((gpu) => !gpu.unifiedMemory && gpu.memoryTotalMiB !== null);
  if (discrete.length > 0) return discrete.reduce((sum, gpu) => sum + (gpu.memoryTotalMiB ?? 0), 0);
  return inventory.memoryTotalMiB;
}

function rejection(machine: CandidateMachine, request: PlacementRequest): string | null {
  if (machine.liveness !== 'ready') return `machine is ${machine.liveness}`;
  if (machine.cordoned) return 'machine is cordoned';
  if (machine.draining) return 'machine is draining';
  const failure = machine.replicaFailures.get(request.deploymentId);
  if (failure !== undefined) return `replica failed here: ${failure}`;
  if (machine.deploymentIds.has(request.deploymentId)) return 'already runs a replica of this deployment';
  for (const [key, value] of Object.entries(request.selector)) {
    if (machine.labels[key] !== value) return `label ${key}=${value} not present`;
  }
  const freeGpus = machine.inventory.gpus.length - machine.reserved.gpus;
  if (request.gpus > freeGpus) return `needs ${request.gpus} GPUs, ${freeGpus} free`;
  const freeMemory = machineMemoryMiB(machine.inventory) - machine.reserved.memoryMiB;
  if (request.memoryMiB > freeMemory) return `needs ${request.memoryMiB} MiB, ${freeMemory} MiB free`;
  return null;
}

/** What scoring compares of an eligible machine, computed once per decision rather than once per comparison. */
interface Scored {
  machine: CandidateMachine;
  warm: number;
  freeMemoryMiB: number;
}

/** Negative when `a` is the better home: fewer assignments, warm model, more free memory, lighter load, lower id. */
function compareScored(a: Scored, b: Scored): number {
  return (
    a.machine.reserved.assignments - b.machine.reserved.assignments ||
    a.warm - b.warm ||
    b.freeMemoryMiB - a.freeMemoryMiB ||
    a.machine.load - b.machine.load ||
    (a.machine.id < b.machine.id ? -1 : a.machine.id > b.machine.id ? 1 : 0)
  );
}

/**
 * Filter then score (docs/design.md section 6): hard requirements first, then the machine with the fewest
 * assignments, then one where the model is already warm, then the most free memory, then the lightest
 * reported load, ties broken by id. The same inputs always give the same decision. One pass: the best is kept
 * as the machines are read (the order is total, so this is the first of a full sort), and every other eligible
 * machine is explained as scored lower, in the machines' order.
 */
export function placeReplica(machines: readonly CandidateMachine[], request: PlacementRequest): PlacementDecision {
  const rejected: PlacementDecision['rejected'] = [];
  const eligible: CandidateMachine[] = [];
  let best: Scored | null = null;
  for (const machine of machines) {
    const reason = rejection(machine, request);
    if (reason) {
      rejected.push({ machineId: machine.id, reason });
      continue;
    }
    eligible.push(machine);
    const scored: Scored = {
      machine,
      warm: machine.warmModels.includes(request.model) ? 0 : 1,
      freeMemoryMiB: machineMemoryMiB(machine.inventory) - machine.reserved.memoryMiB,
    };
    if (!best || compareScored(scored, best) < 0) best = scored;
  }
  for (const other of eligible) if (other !== best?.machine) rejected.push({ machineId: other.id, reason: 'scored lower' });
  return { machineId: best?.machine.id ?? null, rejected };
}
