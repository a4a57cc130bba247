import type { MachineLiveness } from '../../../shared/contracts/machine.js';
import type { Inventory } from '../../../shared/contracts/inventory.js';

export interface CandidateMachine {
  id: string;
  labels: Record<string, string>;
  liveness: MachineLiveness;
  cordoned: boolean;
  draining: boolean;
  inventory: Inventory;
  /** Models its agent reports loaded in a ready runtime. */
  warmModels: readonly string[];
  /** Model versions (`mv_...`) whose files its agent reports verified in its cache. */
  cachedVersions: readonly string[];
  /** Invocations its runtimes report running or queued: the machine's observed load. */
  load: number;
  /** Resources already reserved by this machine's assignments: replicas and run workers alike. */
  reserved: Reserved;
  /** Replica sets with a current replica here. */
  deploymentIds: ReadonlySet<string>;
  /** How many current replicas of each set are here, for spreading; absent: one of each set in `deploymentIds`. */
  replicaCounts?: ReadonlyMap<string, number>;
  /**
   * Deployments whose replica failed for good here (an open mark), with why: none of their replicas is placed here
   * again until an operator clears the mark, so that a replica that fails everywhere ends unplaceable, never in a loop.
   */
  replicaFailures: ReadonlyMap<string, string>;
  /**
   * The aged run this machine is held for this pass (docs/runs.md, "Aging"), and the replica sets with a replica here,
   * current or outdated: only those may place here (a rollout replacing in place), so that the machine empties
   * toward the run rather than being backfilled. Absent: not held.
   */
  hold?: { runId: string; hosting: ReadonlySet<string> };
}

/**
 * What a machine's assignments hold. `cores` is absent where nothing reserves cores (replicas do not), which counts as
 * none reserved.
 */
interface Reserved {
  gpus: number;
  memoryMiB: number;
  assignments: number;
  cores?: number;
}

/** Labels a rule of the workspace's policy (a data class, a licence) requires of a machine; `rule` names it in reasons. */
export interface PlacementConstraint {
  rule: string;
  labels: Record<string, string>;
}

export interface PlacementRequest {
  /** The replica set placed (docs/scheduler.md: a deployment's stable or canary set). */
  deploymentId: string;
  model: string;
  selector: Record<string, string>;
  gpus: number;
  memoryMiB: number;
  /** Memory each GPU of the machine must have; absent or 0: any. */
  gpuMemoryMiB?: number;
  /** CPU cores reserved (of the inventory's `cpus`); absent or 0: none. */
  cores?: number;
  /** At most this many replicas of the set on one machine, resources allowing; absent: 1. */
  replicasPerMachine?: number;
  /** The registry version the replica runs: a machine that has it cached scores like one where the model is warm. */
  versionId?: string | null;
  /** Policy rules besides the selector (data class, licence). */
  constraints?: readonly PlacementConstraint[];
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

/**
 * Memory each GPU of a machine offers, consistently with `machineMemoryMiB`: the smallest discrete GPU's, or host
 * memory where GPUs share it (the DGX Spark's GB10) or report none; null on a machine without GPUs.
 */
export function gpuMemoryEachMiB(inventory: Inventory): number | null {
  if (inventory.gpus.length === 0) return null;
  const discrete = inventory.gpus.filter((gpu) => !gpu.unifiedMemory && gpu.memoryTotalMiB !== null);
  if (discrete.length > 0) return Math.min(...discrete.map((gpu) => gpu.memoryTotalMiB ?? 0));
  return inventory.memoryTotalMiB;
}

/**
 * What a machine offers to reservations, or has left of it: GPUs (a count), cores, memory as `machineMemoryMiB`
 * counts it, and the memory of each GPU (a filter: GPUs are reserved whole).
 */
export interface Resources {
  gpus: number;
  cores: number;
  memoryMiB: number;
  gpuMemoryEachMiB: number | null;
}

/** What a reservation takes of a machine: a replica's, or one run worker's. */
export interface ResourceNeed {
  gpus: number;
  memoryMiB: number;
  /** Absent or 0: any. */
  gpuMemoryMiB?: number;
  /** Absent or 0: none. */
  cores?: number;
}

/** Derived once per inventory object rather than once per decision. */
const capacities = new WeakMap<Inventory, Resources>();
export function capacityOf(inventory: Inventory): Resources {
  let capacity = capacities.get(inventory);
  if (!capacity) {
    capacity = {
      gpus: inventory.gpus.length,
      cores: inventory.cpus,
      memoryMiB: machineMemoryMiB(inventory),
      gpuMemoryEachMiB: gpuMemoryEachMiB(inventory),
    };
    capacities.set(inventory, capacity);
  }
  return capacity;
}

/** What is left of a machine once its assignments' reservations are taken from its capacity. */
export function freeOn(machine: Pick<CandidateMachine, 'inventory' | 'reserved'>): Resources {
  const capacity = capacityOf(machine.inventory);
  return {
    gpus: capacity.gpus - machine.reserved.gpus,
    cores: capacity.cores - (machine.reserved.cores ?? 0),
    memoryMiB: capacity.memoryMiB - machine.reserved.memoryMiB,
    gpuMemoryEachMiB: capacity.gpuMemoryEachMiB,
  };
}

/** Why `need` does not fit in `free` (GPUs, then memory per GPU, memory, cores), or null when it does. */
export function resourceRefusal(free: Resources, need: ResourceNeed): string | null {
  if (need.gpus > free.gpus) return `needs ${need.gpus} GPUs, ${free.gpus} free`;
  const perGpu = need.gpuMemoryMiB ?? 0;
  if (perGpu > 0) {
    if (free.gpuMemoryEachMiB === null) return `needs GPUs of ${perGpu} MiB, has no GPU`;
    if (free.gpuMemoryEachMiB < perGpu) return `needs GPUs of ${perGpu} MiB, its GPUs have ${free.gpuMemoryEachMiB} MiB`;
  }
  if (need.memoryMiB > free.memoryMiB) return `needs ${need.memoryMiB} MiB, ${free.memoryMiB} MiB free`;
  const cores = need.cores ?? 0;
  if (cores > free.cores) return `needs ${cores} cores, ${free.cores} free`;
  return null;
}

/** Why a machine takes nothing new whatever is asked of it (liveness, cordon, drain), or null. */
export function machineRefusal(machine: Pick<CandidateMachine, 'liveness' | 'cordoned' | 'draining'>): string | null {
  if (machine.liveness !== 'ready') return `machine is ${machine.liveness}`;
  if (machine.cordoned) return 'machine is cordoned';
  if (machine.draining) return 'machine is draining';
  return null;
}

/** Why a machine held for an aged run takes no new work: the same words for replicas and for runs. */
export const heldRefusal = (runId: string) => `held for aged run ${runId}`;

/** Why a machine's labels do not satisfy a selector and the policy's rules, or null. */
export function selectorRefusal(
  labels: Record<string, string>,
  selector: Record<string, string>,
  constraints: readonly PlacementConstraint[] = [],
): string | null {
  const label = missingLabel(labels, selector);
  if (label) return `label ${label} not present`;
  for (const constraint of constraints) {
    const needed = missingLabel(labels, constraint.labels);
    if (needed) return `${constraint.rule} needs label ${needed}`;
  }
  return null;
}

/** Whether replicas of a set reserve something: only then may several share a machine (their reservations bound them). */
const reservesResources = (request: Pick<PlacementRequest, 'gpus' | 'memoryMiB'>) => request.gpus > 0 || request.memoryMiB > 0;

const replicasHere = (machine: CandidateMachine, setId: string) => machine.replicaCounts?.get(setId) ?? (machine.deploymentIds.has(setId) ? 1 : 0);

export function missingLabel(labels: Record<string, string>, wanted: Record<string, string>): string | null {
  for (const key in wanted) if (labels[key] !== wanted[key]) return `${key}=${wanted[key]}`;
  return null;
}

function rejection(machine: CandidateMachine, request: PlacementRequest, free: Resources): string | null {
  const unavailable = machineRefusal(machine);
  if (unavailable) return unavailable;
  const failure = machine.replicaFailures.get(request.deploymentId);
  if (failure !== undefined) return `replica failed here: ${failure}`;
  if (machine.hold && !machine.hold.hosting.has(request.deploymentId)) return heldRefusal(machine.hold.runId);
  // A set that reserves nothing has nothing that bounds how many of its replicas one machine would take.
  const perMachine = reservesResources(request) ? (request.replicasPerMachine ?? 1) : 1;
  const here = replicasHere(machine, request.deploymentId);
  if (here >= perMachine)
    return perMachine === 1
      ? 'already runs a replica of this deployment'
      : `already runs ${here} replicas of this deployment (replicasPerMachine ${perMachine})`;
  return selectorRefusal(machine.labels, request.selector, request.constraints) ?? resourceRefusal(free, request);
}

/** What scoring compares of an eligible machine, computed once per decision rather than once per comparison. */
interface Scored {
  machine: CandidateMachine;
  here: number;
  warm: number;
  freeMemoryMiB: number;
}

/**
 * Negative when `a` is the better home: fewer replicas of the same set (spreading), fewer assignments, model warm
 * or version cached, more free memory, lighter load, lower id.
 */
function compareScored(a: Scored, b: Scored): number {
  return (
    a.here - b.here ||
    a.machine.reserved.assignments - b.machine.reserved.assignments ||
    a.warm - b.warm ||
    b.freeMemoryMiB - a.freeMemoryMiB ||
    a.machine.load - b.machine.load ||
    (a.machine.id < b.machine.id ? -1 : a.machine.id > b.machine.id ? 1 : 0)
  );
}

/**
 * Filter then score (docs/scheduler.md): hard requirements first (liveness, cordon, drain, failure marks, a hold for an
 * aged run (unless this set has a replica there), one
 * replica per machine for a set that reserves nothing, labels, policy rules, GPUs, memory per GPU, memory, cores), then
 * the machine with the fewest replicas of this set, then the fewest assignments, then one where the model is warm
 * or the version cached, then the most free memory, then the lightest reported load, ties broken by id. The same
 * inputs always give the same decision. One pass: the best is kept as the machines are read (the order is total,
 * so this is the first of a full sort), and every other eligible machine is explained as scored lower, in the
 * machines' order.
 */
export function placeReplica(machines: readonly CandidateMachine[], request: PlacementRequest): PlacementDecision {
  const rejected: PlacementDecision['rejected'] = [];
  const eligible: CandidateMachine[] = [];
  const versionId = request.versionId ?? null;
  let best: Scored | null = null;
  for (const machine of machines) {
    const free = freeOn(machine);
    const reason = rejection(machine, request, free);
    if (reason) {
      rejected.push({ machineId: machine.id, reason });
      continue;
    }
    eligible.push(machine);
    const scored: Scored = {
      machine,
      here: replicasHere(machine, request.deploymentId),
      warm: machine.warmModels.includes(request.model) || (versionId !== null && machine.cachedVersions.includes(versionId)) ? 0 : 1,
      freeMemoryMiB: free.memoryMiB,
    };
    if (!best || compareScored(scored, best) < 0) best = scored;
  }
  for (const other of eligible) if (other !== best?.machine) rejected.push({ machineId: other.id, reason: 'scored lower' });
  return { machineId: best?.machine.id ?? null, rejected };
}
