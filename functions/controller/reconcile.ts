import type { Inventory } from '../../shared/contracts/inventory.js';
import type { MachineLiveness } from '../../shared/contracts/machine.js';
import type { RolloutSpec } from '../../shared/contracts/deployment.js';
import { placeReplica, type CandidateMachine } from '../scheduler/place.js';

export interface DesiredDeployment {
  id: string;
  model: string;
  generation: number;
  /** Digest of the replica template (functions/fleet/template.ts): replicas of another template are rolled. */
  templateHash: string;
  replicas: number;
  selector: Record<string, string>;
  gpus: number;
  memoryMiB: number;
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
  /** Invocations its runtimes report running or queued. */
  load: number;
  /** Deployments whose replica failed for good here and whose mark no operator cleared yet, with why. */
  replicaFailures: ReadonlyMap<string, string>;
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
}

export type RetireReason = 'deployment deleted' | 'machine revoked' | 'scaled down' | 'rolled out' | 'machine drained';

export type ReconcileAction =
  | { type: 'assign'; deploymentId: string; machineId: string }
  /** Same template, newer generation: the spec is rewritten in place and the agent restarts nothing. */
  | { type: 'update'; assignmentId: string; deploymentId: string; machineId: string }
  | { type: 'unassign'; assignmentId: string; deploymentId: string; machineId: string; reason: RetireReason }
  /** A replica that failed for good: retired, and its machine marked so that neither its replacement nor a later replica goes there. */
  | { type: 'fail'; assignmentId: string; deploymentId: string; machineId: string; reason: string }
  | { type: 'pending'; deploymentId: string; missing: number; rejected: Array<{ machineId: string; reason: string }> };

const byMachineIdDesc = (a: CurrentAssignment, b: CurrentAssignment) => (a.machineId < b.machineId ? 1 : a.machineId > b.machineId ? -1 : 0);

/**
 * Which of a deployment's replicas to retire and how many to add this pass (docs/design.md section 6). Replicas of
 * the current template on a machine that is not draining are "current"; the rest are "outdated" and are
 * replaced: new ones start first (at most `maxSurge` above the desired count), and an outdated one is retired
 * only while the available replicas stay at or above `replicas - maxUnavailable`. Scaling retires surplus
 * current replicas at once (unavailable ones first) and leaves the others alone. Pure.
 */
export function planRollout(input: {
  deployment: Pick<DesiredDeployment, 'templateHash' | 'replicas' | 'rollout'>;
  assignments: readonly CurrentAssignment[];
  drainingMachines: ReadonlySet<string>;
}): { retire: Array<{ assignment: CurrentAssignment; reason: RetireReason }>; add: number } {
  const { replicas, rollout } = input.deployment;
  const isCurrent = (a: CurrentAssignment) => a.templateHash === input.deployment.templateHash && !input.drainingMachines.has(a.machineId);
  // Unavailable ones go first, then from the highest machine id, so the choice is stable.
  const order = (list: CurrentAssignment[]) => [...list].sort((a, b) => Number(a.available) - Number(b.available) || byMachineIdDesc(a, b));
  const current = order(input.assignments.filter(isCurrent));
  const outdated = order(input.assignments.filter((a) => !isCurrent(a)));
  const retire: Array<{ assignment: CurrentAssignment; reason: RetireReason }> = [];
  const outdatedReason = (a: CurrentAssignment): RetireReason => (input.drainingMachines.has(a.machineId) ? 'machine drained' : 'rolled out');

  const surplus = Math.max(0, current.length - replicas);
  for (const assignment of current.slice(0, surplus)) retire.push({ assignment, reason: 'scaled down' });
  const kept = current.slice(surplus);

  let available = kept.filter((a) => a.available).length + outdated.filter((a) => a.available).length;
  const minAvailable = Math.max(0, replicas - rollout.maxUnavailable);
  for (const assignment of outdated) {
    // An outdated replica that serves nothing costs no availability; one that serves goes only while enough others do.
    if (assignment.available) {
      if (available - 1 < minAvailable) continue;
      available -= 1;
    }
    retire.push({ assignment, reason: outdatedReason(assignment) });
  }
  const remaining = kept.length + outdated.length - (retire.length - surplus);
  const add = Math.max(0, Math.min(replicas - kept.length, replicas + rollout.maxSurge - remaining));
  return { retire, add };
}

/**
 * The reconciler: desired deployments against observed machines and current assignments -> actions. Pure.
 * Assignments on `stale` or `down` machines are kept: sight was lost, the runtime may still run and its
 * resources stay reserved until the machine reports again. Revoked machines lose theirs. A replica of the
 * current template that failed for good is lost: it is retired and replaced on a machine where this deployment
 * has not failed (an outdated one is left to the rollout, which retires it as it serves nothing).
 */
export function reconcile(input: {
  deployments: readonly DesiredDeployment[];
  machines: readonly ObservedMachine[];
  assignments: readonly CurrentAssignment[];
}): ReconcileAction[] {
  const actions: ReconcileAction[] = [];
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
  const candidates: CandidateMachine[] = input.machines.map((machine) => ({
    ...machine,
    reserved: { gpus: 0, memoryMiB: 0, assignments: 0 },
    deploymentIds: new Set<string>(),
    replicaFailures: failuresAt.get(machine.id)!,
  }));
  const candidateById = new Map(candidates.map((c) => [c.id, c]));
  // Every replica still on a machine holds its resources; only a current one rules out another replica there,
  // so that a rollout may start the new replica beside the outdated one it replaces.
  const reserve = (machineId: string, deployment: DesiredDeployment, current: boolean) => {
    const candidate = candidateById.get(machineId);
    if (!candidate) return;
    candidate.reserved.gpus += deployment.gpus;
    candidate.reserved.memoryMiB += deployment.memoryMiB;
    candidate.reserved.assignments += 1;
    if (current) (candidate.deploymentIds as Set<string>).add(deployment.id);
  };

  const drainingMachines = new Set(input.machines.filter((m) => m.draining).map((m) => m.id));
  const sortedDeployments = input.deployments.filter((d) => !d.deleted).sort((a, b) => (a.id < b.id ? -1 : 1));
  const toAdd = new Map<string, number>();
  for (const deployment of sortedDeployments) {
    const kept = keptByDeployment.get(deployment.id) ?? [];
    const current: CurrentAssignment[] = [];
    for (const assignment of kept) {
      if (assignment.failure === null || assignment.templateHash !== deployment.templateHash) {
        current.push(assignment);
        continue;
      }
      actions.push({ type: 'fail', assignmentId: assignment.id, deploymentId: deployment.id, machineId: assignment.machineId, reason: assignment.failure });
      failuresAt.get(assignment.machineId)?.set(deployment.id, assignment.failure);
      reserve(assignment.machineId, deployment, false);
    }
    const plan = planRollout({ deployment, assignments: current, drainingMachines });
    const retired = new Set(plan.retire.map((r) => r.assignment.id));
    for (const { assignment, reason } of plan.retire) unassign(assignment, reason);
    for (const assignment of current) {
      const isCurrent = assignment.templateHash === deployment.templateHash && !drainingMachines.has(assignment.machineId);
      reserve(assignment.machineId, deployment, isCurrent && !retired.has(assignment.id));
      if (retired.has(assignment.id)) continue;
      if (assignment.deploymentGeneration !== deployment.generation && assignment.templateHash === deployment.templateHash) {
        actions.push({ type: 'update', assignmentId: assignment.id, deploymentId: deployment.id, machineId: assignment.machineId });
      }
    }
    toAdd.set(deployment.id, plan.add);
  }

  for (const deployment of sortedDeployments) {
    for (let missing = toAdd.get(deployment.id) ?? 0; missing > 0; missing--) {
      const decision = placeReplica(candidates, {
        deploymentId: deployment.id,
        model: deployment.model,
        selector: deployment.selector,
        gpus: deployment.gpus,
        memoryMiB: deployment.memoryMiB,
      });
      if (!decision.machineId) {
        actions.push({ type: 'pending', deploymentId: deployment.id, missing, rejected: decision.rejected });
        break;
      }
      actions.push({ type: 'assign', deploymentId: deployment.id, machineId: decision.machineId });
      reserve(decision.machineId, deployment, true);
    }
  }
  return actions;
}
