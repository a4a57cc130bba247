import type { Inventory } from '../../shared/contracts/inventory.js';
import type { MachineLiveness } from '../../shared/contracts/machine.js';
import { placeReplica, type CandidateMachine } from '../scheduler/place.js';

export interface DesiredDeployment {
  id: string;
  generation: number;
  replicas: number;
  selector: Record<string, string>;
  gpus: number;
  memoryMiB: number;
  deleted: boolean;
}

export interface ObservedMachine {
  id: string;
  labels: Record<string, string>;
  liveness: MachineLiveness;
  cordoned: boolean;
  draining: boolean;
  inventory: Inventory;
}

export interface CurrentAssignment {
  id: string;
  machineId: string;
  deploymentId: string;
  deploymentGeneration: number;
}

export type ReconcileAction =
  | { type: 'assign'; deploymentId: string; machineId: string }
  | { type: 'update'; assignmentId: string; deploymentId: string; machineId: string }
  | { type: 'unassign'; assignmentId: string; machineId: string; reason: string }
  | { type: 'pending'; deploymentId: string; missing: number; rejected: Array<{ machineId: string; reason: string }> };

/**
 * The reconciler: desired deployments against observed machines and current assignments -> actions. Pure.
 * Assignments on `stale` or `down` machines are kept: sight was lost, the runtime may still run and its
 * resources stay reserved until the machine reports again. Revoked machines lose theirs.
 */
export function reconcile(input: {
  deployments: readonly DesiredDeployment[];
  machines: readonly ObservedMachine[];
  assignments: readonly CurrentAssignment[];
}): ReconcileAction[] {
  const actions: ReconcileAction[] = [];
  const machineById = new Map(input.machines.map((m) => [m.id, m]));
  const deploymentById = new Map(input.deployments.map((d) => [d.id, d]));
  const kept: CurrentAssignment[] = [];

  for (const assignment of input.assignments) {
    const deployment = deploymentById.get(assignment.deploymentId);
    const machine = machineById.get(assignment.machineId);
    if (!deployment || deployment.deleted) {
      actions.push({ type: 'unassign', assignmentId: assignment.id, machineId: assignment.machineId, reason: 'deployment deleted' });
    } else if (!machine || machine.liveness === 'revoked') {
      actions.push({ type: 'unassign', assignmentId: assignment.id, machineId: assignment.machineId, reason: 'machine revoked' });
    } else {
      kept.push(assignment);
    }
  }

  const candidates: CandidateMachine[] = input.machines.map((machine) => ({
    ...machine,
    reserved: { gpus: 0, memoryMiB: 0, assignments: 0 },
    deploymentIds: new Set<string>(),
  }));
  const candidateById = new Map(candidates.map((c) => [c.id, c]));
  const reserve = (machineId: string, deployment: DesiredDeployment) => {
    const candidate = candidateById.get(machineId);
    if (!candidate) return;
    candidate.reserved.gpus += deployment.gpus;
    candidate.reserved.memoryMiB += deployment.memoryMiB;
    candidate.reserved.assignments += 1;
    (candidate.deploymentIds as Set<string>).add(deployment.id);
  };

  const sortedDeployments = [...input.deployments].filter((d) => !d.deleted).sort((a, b) => (a.id < b.id ? -1 : 1));
  const keptByDeployment = new Map<string, CurrentAssignment[]>();
  for (const assignment of kept) {
    const list = keptByDeployment.get(assignment.deploymentId) ?? [];
    list.push(assignment);
    keptByDeployment.set(assignment.deploymentId, list);
  }

  for (const deployment of sortedDeployments) {
    const current = keptByDeployment.get(deployment.id) ?? [];
    // Scale down from the least healthy machines first, then from the highest id, so the choice is stable.
    const rank = (a: CurrentAssignment) => (machineById.get(a.machineId)?.liveness === 'ready' ? 1 : 0);
    const ordered = [...current].sort((a, b) => rank(a) - rank(b) || (a.machineId < b.machineId ? 1 : -1));
    const surplus = Math.max(0, current.length - deployment.replicas);
    for (const assignment of ordered.slice(0, surplus)) {
      actions.push({ type: 'unassign', assignmentId: assignment.id, machineId: assignment.machineId, reason: 'scaled down' });
    }
    for (const assignment of ordered.slice(surplus)) {
      reserve(assignment.machineId, deployment);
      if (assignment.deploymentGeneration !== deployment.generation) {
        actions.push({ type: 'update', assignmentId: assignment.id, deploymentId: deployment.id, machineId: assignment.machineId });
      }
    }
  }

  for (const deployment of sortedDeployments) {
    const have = Math.min(deployment.replicas, (keptByDeployment.get(deployment.id) ?? []).length);
    for (let missing = deployment.replicas - have; missing > 0; missing--) {
      const decision = placeReplica(candidates, {
        deploymentId: deployment.id,
        selector: deployment.selector,
        gpus: deployment.gpus,
        memoryMiB: deployment.memoryMiB,
      });
      if (!decision.machineId) {
        actions.push({ type: 'pending', deploymentId: deployment.id, missing, rejected: decision.rejected });
        break;
      }
      actions.push({ type: 'assign', deploymentId: deployment.id, machineId: decision.machineId });
      reserve(decision.machineId, deployment);
    }
  }
  return actions;
}
