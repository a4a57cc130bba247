import type { Inventory } from '../../../shared/contracts/inventory.js';
import type { MachineLiveness } from '../../../shared/contracts/machine.js';
import type { RolloutSpec } from '../../../shared/contracts/deployment.js';
import { ControlPlaneConfig } from '../../kernel/config.js';
import type { WorkspaceQuota } from '../../../shared/contracts/placement.js';
import { placeReplica, type PlacementConstraint } from '../scheduler/place.js';
import { quotaRefusal, type QuotaUsage } from '../scheduler/quota.js';
import { isLost, replacementPause } from './lost-machines.js';

export interface DesiredDeployment {
  /** The replica set's id: its deployment's id for the stable set, `<id>/canary` for its canary (functions/core/fleet/tracks.ts). */
  id: string;
  model: string;
  generation: number;
  /** Digest of the replica template (functions/core/registry/template.ts): replicas of another template are rolled. */
  templateHash: string;
  replicas: number;
  selector: Record<string, string>;
  gpus: number;
  /** Memory each GPU of its machines must have (0: any). */
  gpuMemoryMiB: number;
  memoryMiB: number;
  /** At most this many of its replicas on one machine. */
  replicasPerMachine: number;
  /** The registry version it runs (`mv_...`), or null: machines that have it cached are preferred. */
  versionId: string | null;
  /** What the workspace's policy asks of its machines besides the selector (data class, licence). */
  constraints: readonly PlacementConstraint[];
  /**
   * Why the set cannot be worked on now (its source or runtime does not resolve, its policy refuses it): its
   * replicas are kept as they are (reserved, neither rolled, replaced nor retired), nothing is placed, and it is
   * reported pending with this reason. Null otherwise.
   */
  hold: string | null;
  rollout: RolloutSpec;
  deleted: boolean;
}

export interface ObservedMachine {
  id: string;
  labels: Record<string, string>;
  liveness: MachineLiveness;
  cordoned: boolean;
  draining: boolean;
  inventory: Inventory;
  warmModels: readonly string[];
  cachedVersions: readonly string[];
  /** Invocations its runtimes report running or queued. */
  load: number;
  /** Deployments whose replica failed for good here and whose mark no operator cleared yet, with why. */
  replicaFailures: ReadonlyMap<string, string>;
  /** What run workers reserve here: replicas are placed around them, and the workspace's quota counts them. */
  workerReserved?: { gpus: number; memoryMiB: number; cores: number };
  /** The aged run the queue holds this machine for (docs/runs.md, "Aging"): no new replica set is placed here. */
  heldFor?: string;
}

export interface CurrentAssignment {
  id: string;
  machineId: string;
  deploymentId: string;
  deploymentGeneration: number;
  templateHash: string;
  /** Serving now (routable): what a rollout counts as available. */
  available: boolean;
  /** Why its runtime failed for good (reported failed with no restart left by its policy); null while it has not. */
  failure: string | null;
  /**
   * What its signed spec reserves (what the store's re-check sums); absent: what its set reserves now, which is the
   * same for a replica of the current template (resources are part of the template).
   */
  resources?: { gpus: number; memoryMiB: number };
}

export type RetireReason = 'deployment deleted' | 'machine revoked' | 'scaled down' | 'rolled out' | 'machine drained';

export type ReconcileAction =
  | { type: 'assign'; deploymentId: string; machineId: string }
  /** Same template, newer generation: the spec is rewritten in place and the agent restarts nothing. */
  | { type: 'update'; assignmentId: string; deploymentId: string; machineId: string }
  | { type: 'unassign'; assignmentId: string; deploymentId: string; machineId: string; reason: RetireReason }
  /** A replica that failed for good: retired, and its machine marked so that neither its replacement nor a later replica goes there. */
  | { type: 'fail'; assignmentId: string; deploymentId: string; machineId: string; reason: string }
  /**
   * Replicas of a set it could not place: with the reason of every machine rejected, and `reason` when the whole set
   * waits (the workspace quota, replacement paused, a hold).
   */
  | { type: 'pending'; deploymentId: string; missing: number; reason?: string; rejected: Array<{ machineId: string; reason: string }> };

const byMachineIdDesc = (a: CurrentAssignment, b: CurrentAssignment) => (a.machineId < b.machineId ? 1 : a.machineId > b.machineId ? -1 : 0);

const NONE: ReadonlySet<string> = new Set();
const DEFAULT_PAUSE_FRACTION = ControlPlaneConfig.shape.replacementPauseFraction.parse(undefined);

/**
 * Which of a replica set's replicas to retire and how many to add this pass (docs/scheduler.md). Replicas of the
 * current template on a machine that is not draining are "current"; the rest are "outdated" and are replaced: new
 * ones start first (at most `maxSurge` above the desired count), and an outdated one is retired only while the
 * available replicas stay at or above `replicas - maxUnavailable`. Scaling retires surplus current replicas at once
 * (unavailable ones first) and leaves the others alone. A `lost` current replica (its machine is down) does not
 * count: it is replaced, and kept while the desired count could take it back, so that a machine that returns has
 * its runtime re-adopted (the surplus is then retired by the same rule, a replacement still starting first). Pure.
 */
export function planRollout(input: {
  deployment: Pick<DesiredDeployment, 'templateHash' | 'replicas' | 'rollout'>;
  assignments: readonly CurrentAssignment[];
  drainingMachines: ReadonlySet<string>;
  lost?: ReadonlySet<string>;
}): { retire: Array<{ assignment: CurrentAssignment; reason: RetireReason }>; add: number } {
  const { replicas, rollout } = input.deployment;
  const lostIds = input.lost ?? NONE;
  const isCurrent = (a: CurrentAssignment) => a.templateHash === input.deployment.templateHash && !input.drainingMachines.has(a.machineId);
  // Unavailable ones go first, then from the highest machine id, so the choice is stable.
  const order = (list: CurrentAssignment[]) => [...list].sort((a, b) => Number(a.available) - Number(b.available) || byMachineIdDesc(a, b));
  const current = order(input.assignments.filter((a) => isCurrent(a) && !lostIds.has(a.id)));
  const lost = order(input.assignments.filter((a) => isCurrent(a) && lostIds.has(a.id)));
  const outdated = order(input.assignments.filter((a) => !isCurrent(a)));
  const retire: Array<{ assignment: CurrentAssignment; reason: RetireReason }> = [];
  const outdatedReason = (a: CurrentAssignment): RetireReason => (input.drainingMachines.has(a.machineId) ? 'machine drained' : 'rolled out');

  const surplus = Math.max(0, current.length - replicas);
  for (const assignment of current.slice(0, surplus)) retire.push({ assignment, reason: 'scaled down' });
  const kept = current.slice(surplus);
  for (const assignment of lost.slice(0, Math.max(0, lost.length - replicas))) retire.push({ assignment, reason: 'scaled down' });

  let available = kept.filter((a) => a.available).length + outdated.filter((a) => a.available).length;
  const minAvailable = Math.max(0, replicas - rollout.maxUnavailable);
  let outdatedRetired = 0;
  for (const assignment of outdated) {
    // An outdated replica that serves nothing costs no availability; one that serves goes only while enough others do.
    if (assignment.available) {
      if (available - 1 < minAvailable) continue;
      available -= 1;
    }
    retire.push({ assignment, reason: outdatedReason(assignment) });
    outdatedRetired += 1;
  }
  const remaining = kept.length + outdated.length - outdatedRetired;
  const add = Math.max(0, Math.min(replicas - kept.length, replicas + rollout.maxSurge - remaining));
  return { retire, add };
}

type Pending = Omit<Extract<ReconcileAction, { type: 'pending' }>, 'type' | 'deploymentId'>;

/** One pending report per set: the replicas waiting for the pause, and those placement or the quota refused. */
function mergePending(a: Pending | null, b: Pending): Pending {
  if (!a) return b;
  const reason = [a.reason, b.reason].filter((r) => r !== undefined).join('; ');
  return { missing: a.missing + b.missing, ...(reason ? { reason } : {}), rejected: [...a.rejected, ...b.rejected] };
}

/**
 * The reconciler: desired replica sets of one workspace against its observed machines and current assignments ->
 * actions. Pure. Assignments on `stale` machines are kept and counted: sight was lost, the runtime may still run.
 * Those on `down` machines are kept and reserved too, but lost (`planRollout`): they are replaced elsewhere, unless
 * so many machines are silent at once that it is likely a partition (`replacementPause`), when they are counted as
 * before and their sets report the pause. Revoked machines lose theirs. A replica of the current template that
 * failed for good is retired and replaced on a machine where this set has not failed (an outdated one is left to
 * the rollout, which retires it as it serves nothing). A placement the workspace's quota cannot take is refused,
 * with the quota's reason; the quota counts every desired assignment of the workspace, held sets' included.
 */
export function reconcile(input: {
  deployments: readonly DesiredDeployment[];
  machines: readonly ObservedMachine[];
  assignments: readonly CurrentAssignment[];
  /** The workspace's quota; absent: unbounded. */
  quota?: WorkspaceQuota;
  /** `replacementPauseFraction` of the configuration; absent: its default. */
  replacementPauseFraction?: number;
}): ReconcileAction[] {
  const actions: ReconcileAction[] = [];
  const quota = input.quota ?? {};
  const machineById = new Map(input.machines.map((m) => [m.id, m]));
  const deploymentById = new Map(input.deployments.map((d) => [d.id, d]));
  const keptByDeployment = new Map<string, CurrentAssignment[]>();
  const unassign = (a: CurrentAssignment, reason: RetireReason) =>
    actions.push({ type: 'unassign', assignmentId: a.id, deploymentId: a.deploymentId, machineId: a.machineId, reason });

  for (const assignment of input.assignments) {
    const deployment = deploymentById.get(assignment.deploymentId);
    const machine = machineById.get(assignment.machineId);
    if (!deployment || deployment.deleted) unassign(assignment, 'deployment deleted');
    else if (!machine || machine.liveness === 'revoked') unassign(assignment, 'machine revoked');
    else keptByDeployment.set(assignment.deploymentId, [...(keptByDeployment.get(assignment.deploymentId) ?? []), assignment]);
  }

  // A replica that fails for good in this pass marks its machine at once: its replacement must not land there.
  const failuresAt = new Map(input.machines.map((m) => [m.id, new Map(m.replicaFailures)]));
  // A held machine still takes the sets already on it: a rollout replaces in place, what the machine holds unchanged.
  const hosting = new Map<string, Set<string>>();
  for (const [deploymentId, kept] of keptByDeployment)
    for (const a of kept) hosting.set(a.machineId, (hosting.get(a.machineId) ?? new Set()).add(deploymentId));
  const candidates = input.machines.map((machine) => ({
    ...machine,
    hold: machine.heldFor === undefined ? undefined : { runId: machine.heldFor, hosting: hosting.get(machine.id) ?? new Set<string>() },
    reserved: {
      gpus: machine.workerReserved?.gpus ?? 0,
      memoryMiB: machine.workerReserved?.memoryMiB ?? 0,
      cores: machine.workerReserved?.cores ?? 0,
      assignments: 0,
    },
    deploymentIds: new Set<string>(),
    replicaCounts: new Map<string, number>(),
    replicaFailures: failuresAt.get(machine.id)!,
  }));
  const candidateById = new Map(candidates.map((c) => [c.id, c]));
  const usage: QuotaUsage = {
    gpus: input.machines.reduce((sum, m) => sum + (m.workerReserved?.gpus ?? 0), 0),
    memoryMiB: input.machines.reduce((sum, m) => sum + (m.workerReserved?.memoryMiB ?? 0), 0),
    replicas: 0,
  };
  const resourcesOf = (a: CurrentAssignment, d: DesiredDeployment) => a.resources ?? { gpus: d.gpus, memoryMiB: d.memoryMiB };
  /**
   * Every replica still on a machine holds its resources there until its node stops it; only a current one counts
   * for spreading and rules out another replica of a set that reserves nothing, so that a rollout may start the
   * new replica beside the outdated one it replaces. The quota counts the replicas still desired, as the store's
   * re-check does.
   */
  const reserve = (machineId: string, resources: { gpus: number; memoryMiB: number }, currentOf: string | null, desired: boolean) => {
    const candidate = candidateById.get(machineId);
    if (candidate) {
      candidate.reserved.gpus += resources.gpus;
      candidate.reserved.memoryMiB += resources.memoryMiB;
      candidate.reserved.assignments += 1;
      if (currentOf !== null) {
        candidate.deploymentIds.add(currentOf);
        candidate.replicaCounts.set(currentOf, (candidate.replicaCounts.get(currentOf) ?? 0) + 1);
      }
    }
    if (desired) {
      usage.gpus += resources.gpus;
      usage.memoryMiB += resources.memoryMiB;
      usage.replicas += 1;
    }
  };

  const pause = replacementPause(input.machines, input.replacementPauseFraction ?? DEFAULT_PAUSE_FRACTION);
  const onDownMachine = (a: CurrentAssignment) => isLost(machineById.get(a.machineId)!.liveness);
  const drainingMachines = new Set(input.machines.filter((m) => m.draining).map((m) => m.id));
  const sortedDeployments = input.deployments.filter((d) => !d.deleted).sort((a, b) => (a.id < b.id ? -1 : 1));
  const toAdd = new Map<string, number>();
  const paused = new Map<string, number>();
  for (const deployment of sortedDeployments) {
    const kept = keptByDeployment.get(deployment.id) ?? [];
    if (deployment.hold !== null) {
      for (const assignment of kept) reserve(assignment.machineId, resourcesOf(assignment, deployment), deployment.id, true);
      actions.push({
        type: 'pending',
        deploymentId: deployment.id,
        missing: Math.max(0, deployment.replicas - kept.length),
        reason: deployment.hold,
        rejected: [],
      });
      continue;
    }
    const current: CurrentAssignment[] = [];
    for (const assignment of kept) {
      if (assignment.failure === null || assignment.templateHash !== deployment.templateHash) {
        current.push(assignment);
        continue;
      }
      actions.push({ type: 'fail', assignmentId: assignment.id, deploymentId: deployment.id, machineId: assignment.machineId, reason: assignment.failure });
      failuresAt.get(assignment.machineId)?.set(deployment.id, assignment.failure);
      reserve(assignment.machineId, resourcesOf(assignment, deployment), null, false);
    }
    const lost = pause ? NONE : new Set(current.filter(onDownMachine).map((a) => a.id));
    const plan = planRollout({ deployment, assignments: current, drainingMachines, lost });
    const retired = new Set(plan.retire.map((r) => r.assignment.id));
    for (const { assignment, reason } of plan.retire) unassign(assignment, reason);
    let waiting = 0;
    for (const assignment of current) {
      const isCurrent = assignment.templateHash === deployment.templateHash && !drainingMachines.has(assignment.machineId);
      const stays = !retired.has(assignment.id);
      reserve(assignment.machineId, resourcesOf(assignment, deployment), isCurrent && stays ? deployment.id : null, stays);
      if (!stays) continue;
      if (pause && isCurrent && onDownMachine(assignment)) waiting += 1;
      if (assignment.deploymentGeneration !== deployment.generation && assignment.templateHash === deployment.templateHash) {
        actions.push({ type: 'update', assignmentId: assignment.id, deploymentId: deployment.id, machineId: assignment.machineId });
      }
    }
    toAdd.set(deployment.id, plan.add);
    if (waiting > 0) paused.set(deployment.id, waiting);
  }

  for (const deployment of sortedDeployments) {
    if (deployment.hold !== null) continue;
    const waiting = paused.get(deployment.id) ?? 0;
    let pending: Pending | null = waiting > 0 ? { missing: waiting, reason: pause!, rejected: [] } : null;
    const need = { gpus: deployment.gpus, memoryMiB: deployment.memoryMiB };
    for (let missing = toAdd.get(deployment.id) ?? 0; missing > 0; missing--) {
      const refusal = quotaRefusal(quota, usage, need);
      if (refusal) {
        pending = mergePending(pending, { missing, reason: refusal, rejected: [] });
        break;
      }
      const decision = placeReplica(candidates, {
        deploymentId: deployment.id,
        model: deployment.model,
        selector: deployment.selector,
        gpus: deployment.gpus,
        gpuMemoryMiB: deployment.gpuMemoryMiB,
        memoryMiB: deployment.memoryMiB,
        replicasPerMachine: deployment.replicasPerMachine,
        versionId: deployment.versionId,
        constraints: deployment.constraints,
      });
      if (!decision.machineId) {
        pending = mergePending(pending, { missing, rejected: decision.rejected });
        break;
      }
      actions.push({ type: 'assign', deploymentId: deployment.id, machineId: decision.machineId });
      reserve(decision.machineId, need, deployment.id, true);
    }
    if (pending) actions.push({ type: 'pending', deploymentId: deployment.id, ...pending });
  }
  return actions;
}
