import { eq, inArray, isNull, sql } from 'drizzle-orm';
import { assignments, deployments, machines } from '../store/schema/index.js';
import { newId } from '../../shared/ids.js';
import type { Assignment } from '../../shared/contracts/desired.js';
import { queryRows, dbNow } from '../store/rows.js';
import { audit, withTransaction, type ServiceCtx } from '../services/service-context.js';
import { loadControllerState, saveControllerState } from '../services/controller-state.js';
import { sweepJtis } from '../services/machine-auth.js';
import { sweepExpiredPayloads } from '../services/payloads.js';
import { machineLiveness, nextResumedAt } from './liveness.js';
import { reconcile, type ReconcileAction } from './reconcile.js';

/** Advisory lock key that makes one reconciler act at a time across instances. */
const RECONCILE_LOCK = 0x4c4e5852; // "LNXR"

type DeploymentRow = typeof deployments.$inferSelect;

function assignmentSpec(assignmentId: string, deployment: DeploymentRow): Assignment {
  return {
    assignmentId,
    deploymentId: deployment.id,
    deploymentName: deployment.name,
    model: deployment.model,
    deploymentGeneration: deployment.generation,
    runtime: deployment.runtime,
    artifact: deployment.artifact ?? null,
    restartPolicy: deployment.restartPolicy,
    resources: { gpus: deployment.gpus, memoryMiB: deployment.memoryMiB },
  };
}

/**
 * One reconcile pass: reads desired and observed state, asks the pure reconciler for actions, applies them in
 * one transaction under an advisory lock (fenced by each machine's generation), then tells the streams.
 * Returns the actions taken; an empty list when another instance held the lock.
 */
export async function reconcileOnce({ ctx }: { ctx: ServiceCtx }): Promise<ReconcileAction[]> {
  const timer = ctx.ports.metrics.reconcileDuration.startTimer();
  const touched = new Set<string>();
  const actions = await withTransaction(ctx, async (tx) => {
    const [lock] = await queryRows<{ locked: boolean }>(tx.db, sql`select pg_try_advisory_xact_lock(${RECONCILE_LOCK}) as locked`);
    if (!lock?.locked) return [];
    const now = await dbNow(tx.db);
    const { resumedAt } = await loadControllerState(tx.db);
    // One after another: a transaction is one connection, and pg does not queue concurrent queries on it.
    const deploymentRows = await tx.db.select().from(deployments).where(isNull(deployments.deletedAt));
    const machineRows = await tx.db.select().from(machines);
    const assignmentRows = await tx.db.select().from(assignments).where(isNull(assignments.removedAt));
    const all: ReconcileAction[] = [];
    const workspaceIds = [...new Set([...deploymentRows, ...machineRows].map((r) => r.workspaceId))].sort();
    for (const workspaceId of workspaceIds) {
      const wsMachines = machineRows.filter((m) => m.workspaceId === workspaceId);
      const wsMachineIds = new Set(wsMachines.map((m) => m.id));
      all.push(
        ...reconcile({
          deployments: deploymentRows
            .filter((d) => d.workspaceId === workspaceId)
            .map((d) => ({ id: d.id, generation: d.generation, replicas: d.replicas, selector: d.selector, gpus: d.gpus, memoryMiB: d.memoryMiB, deleted: false })),
          machines: wsMachines.map((m) => ({
            id: m.id,
            labels: m.labels,
            liveness: machineLiveness({ lastHeartbeatAt: m.lastHeartbeatAt, revokedAt: m.revokedAt, now, resumedAt, config: ctx.ports.config }),
            cordoned: m.cordoned,
            draining: m.draining,
            inventory: m.inventory,
          })),
          assignments: assignmentRows
            .filter((a) => wsMachineIds.has(a.machineId))
            .map((a) => ({ id: a.id, machineId: a.machineId, deploymentId: a.deploymentId, deploymentGeneration: a.spec.deploymentGeneration })),
        }),
      );
    }
    const deploymentById = new Map(deploymentRows.map((d) => [d.id, d]));
    const workspaceOf = new Map(machineRows.map((m) => [m.id, m.workspaceId]));
    for (const action of all) {
      if (action.type === 'pending') continue;
      if (action.type === 'assign') {
        const id = newId('assignment');
        await tx.db.insert(assignments).values({ id, machineId: action.machineId, deploymentId: action.deploymentId, spec: assignmentSpec(id, deploymentById.get(action.deploymentId)!) });
      } else if (action.type === 'update') {
        await tx.db
          .update(assignments)
          .set({ spec: assignmentSpec(action.assignmentId, deploymentById.get(action.deploymentId)!) })
          .where(eq(assignments.id, action.assignmentId));
      } else {
        await tx.db.update(assignments).set({ removedAt: sql`now()` }).where(eq(assignments.id, action.assignmentId));
      }
      touched.add(action.machineId);
      await audit(tx, { workspaceId: workspaceOf.get(action.machineId)!, action: `assignment.${action.type}`, target: action.machineId, details: { ...action } });
    }
    if (touched.size > 0) {
      await tx.db
        .update(machines)
        .set({ desiredGen: sql`${machines.desiredGen} + 1` })
        .where(inArray(machines.id, [...touched]));
    }
    return all;
  });
  timer();
  for (const machineId of touched) await ctx.ports.bus.publish(`machine:${machineId}`, { type: 'desired' });
  return actions;
}

/**
 * The controller tick: records the tick (detecting a control-plane interruption), reconciles, sweeps the
 * replay fence and refreshes the machine gauges.
 */
export async function controllerTick({ ctx }: { ctx: ServiceCtx }): Promise<void> {
  const now = await dbNow(ctx.db);
  const previous = await loadControllerState(ctx.db);
  const resumedAt = nextResumedAt({ ...previous, now, config: ctx.ports.config });
  await saveControllerState(ctx.db, { lastTickAt: now, resumedAt });
  await reconcileOnce({ ctx });
  await sweepJtis({ ctx });
  await sweepExpiredPayloads({ ctx });
  const rows = await ctx.db.select({ lastHeartbeatAt: machines.lastHeartbeatAt, revokedAt: machines.revokedAt }).from(machines);
  const counts: Record<string, number> = { pending: 0, ready: 0, stale: 0, down: 0, revoked: 0 };
  for (const row of rows) counts[machineLiveness({ ...row, now, resumedAt, config: ctx.ports.config })]! += 1;
  for (const [state, n] of Object.entries(counts)) ctx.ports.metrics.machines.set({ state }, n);
}
