import type { deployments } from '../../store/schema/index.js';
import { placementFields, type FleetSnapshot } from './snapshot.js';
import { reconcile, type ReconcileAction } from './reconcile.js';
import { replicaSets, type PlacementInputs } from './replica-sets.js';
import { replicaSetId } from './tracks.js';

type DeploymentRow = typeof deployments.$inferSelect;

/**
 * Reconciles the snapshot's workspaces one by one (placement never crosses a workspace), each deployment as its
 * replica sets (`replicaSets`), each workspace under its quota, off the machines held for aged runs. Actions name sets (`replicaSetOf`). Pure.
 */
export function reconcileFleet(
  snapshot: FleetSnapshot,
  deploymentRows: readonly DeploymentRow[],
  inputs: PlacementInputs,
  config: {
    replacementPauseFraction?: number;
    /** Machine id to the aged run the queue holds it for (`loadRunHolds`): no new replica set is placed there. */
    holds?: ReadonlyMap<string, string>;
  } = {},
): ReconcileAction[] {
  const actions: ReconcileAction[] = [];
  const sets = deploymentRows.map((row) => ({ row, sets: replicaSets(row, inputs) }));
  // A failure mark keeps off the set whose template failed there: a fixed template, or the other track, may go there.
  const setOfTemplate = new Map(sets.flatMap(({ row, sets }) => sets.map((s) => [`${row.id}\u0000${s.desired.templateHash}`, s.desired.id] as const)));
  const workspaceIds = [...new Set([...deploymentRows.map((d) => d.workspaceId), ...snapshot.machines.map((m) => m.workspaceId)])].sort();
  for (const workspaceId of workspaceIds) {
    const machines = snapshot.machines.filter((m) => m.workspaceId === workspaceId);
    actions.push(
      ...reconcile({
        deployments: sets.flatMap(({ row, sets }) => (row.workspaceId === workspaceId ? sets.map((s) => s.desired) : [])),
        machines: machines.map((m) => ({
          ...placementFields(m),
          load: m.runtimes.reduce((sum, r) => sum + r.activeInvocations + r.queueDepth, 0),
          workerReserved: m.workers,
          heldFor: config.holds?.get(m.id),
          replicaFailures: new Map(
            m.replicaFailures.flatMap((f) => {
              const setId = f.templateHash === null ? undefined : setOfTemplate.get(`${f.deploymentId}\u0000${f.templateHash}`);
              return setId === undefined ? [] : [[setId, f.reason] as const];
            }),
          ),
        })),
        assignments: machines.flatMap((m) =>
          m.runtimes
            .filter((r) => r.desired)
            .map((r) => ({
              id: r.assignmentId,
              machineId: m.id,
              deploymentId: replicaSetId(r.deploymentId, r.track),
              deploymentGeneration: r.deploymentGeneration ?? 0,
              templateHash: r.templateHash ?? '',
              available: r.routable,
              failure: r.failure,
              resources: r.resources,
            })),
        ),
        quota: inputs.policies.get(workspaceId)?.quota,
        replacementPauseFraction: config.replacementPauseFraction,
      }),
    );
  }
  return actions;
}
