import { and, count, eq, inArray, isNull, sql } from 'drizzle-orm';
import { assignments, deployments, machines, workspaces } from '../store/schema/index.js';
import type { Db } from '../store/db.js';
import type { Inventory } from '../../shared/contracts/inventory.js';
import { WorkspacePolicy } from '../../shared/contracts/placement.js';
import { machineMemoryMiB } from '../core/scheduler/place.js';

/** A reconcile pass that would overcommit a machine or a quota: thrown in its transaction, which then rolls back. */
export class OvercommitError extends Error {
  override name = 'OvercommitError';
}

interface Sums {
  gpus: number;
  memoryMiB: number;
}

/**
 * What the store's sums say is overcommitted: a machine whose live assignments reserve more GPUs or memory than its
 * inventory offers (memory as the scheduler counts it, `machineMemoryMiB`), a workspace past its quota. Pure.
 */
function overcommits(input: {
  machines: ReadonlyArray<Sums & { name: string; inventory: Inventory }>;
  workspaces: ReadonlyArray<Sums & { id: string; replicas: number; policy: WorkspacePolicy }>;
}): string[] {
  const found: string[] = [];
  for (const m of input.machines) {
    if (m.gpus > m.inventory.gpus.length) found.push(`machine ${m.name}: ${m.gpus} GPUs reserved, it has ${m.inventory.gpus.length}`);
    const memory = machineMemoryMiB(m.inventory);
    if (m.memoryMiB > memory) found.push(`machine ${m.name}: ${m.memoryMiB} MiB reserved, it has ${memory} MiB`);
  }
  for (const w of input.workspaces) {
    const { quota } = w.policy;
    if (quota.gpus !== undefined && w.gpus > quota.gpus) found.push(`workspace ${w.id}: ${w.gpus} GPUs reserved, quota ${quota.gpus}`);
    if (quota.memoryMiB !== undefined && w.memoryMiB > quota.memoryMiB)
      found.push(`workspace ${w.id}: ${w.memoryMiB} MiB reserved, quota ${quota.memoryMiB} MiB`);
    if (quota.replicas !== undefined && w.replicas > quota.replicas) found.push(`workspace ${w.id}: ${w.replicas} replicas, quota ${quota.replicas}`);
  }
  return found;
}

const reserved = {
  gpus: sql<string>`coalesce(sum((${assignments.spec}->'resources'->>'gpus')::numeric), 0)`,
  memoryMiB: sql<string>`coalesce(sum((${assignments.spec}->'resources'->>'memoryMiB')::numeric), 0)`,
};

/**
 * The re-check of docs/design.md section 6, in the placing transaction after its inserts: sums what the live
 * assignments of the machines it placed on, and of their workspaces, reserve (from each assignment's signed
 * spec), against the machines' inventories and the workspaces' quotas. Throws `OvercommitError` (the whole pass
 * rolls back) on any excess. The pure reconciler already refuses such placements and passes are serialised by
 * their lock: this catches a reconciler bug or a writer outside the lock, before it reaches a machine.
 */
export async function recheckReservations(db: Db, touched: { machineIds: readonly string[]; workspaceIds: readonly string[] }): Promise<void> {
  if (touched.machineIds.length === 0 && touched.workspaceIds.length === 0) return;
  const machineRows = touched.machineIds.length
    ? await db
        .select({ name: machines.name, inventory: machines.inventory, ...reserved })
        .from(machines)
        .leftJoin(assignments, and(eq(assignments.machineId, machines.id), isNull(assignments.removedAt)))
        .where(inArray(machines.id, [...touched.machineIds]))
        .groupBy(machines.id)
    : [];
  const workspaceRows = touched.workspaceIds.length
    ? await db
        .select({ id: workspaces.id, policy: workspaces.policy, replicas: count(assignments.id), ...reserved })
        .from(workspaces)
        .leftJoin(deployments, eq(deployments.workspaceId, workspaces.id))
        .leftJoin(assignments, and(eq(assignments.deploymentId, deployments.id), isNull(assignments.removedAt)))
        .where(inArray(workspaces.id, [...touched.workspaceIds]))
        .groupBy(workspaces.id)
    : [];
  const found = overcommits({
    machines: machineRows.map((m) => ({ ...m, gpus: Number(m.gpus), memoryMiB: Number(m.memoryMiB) })),
    workspaces: workspaceRows.map((w) => ({ ...w, gpus: Number(w.gpus), memoryMiB: Number(w.memoryMiB), policy: WorkspacePolicy.parse(w.policy) })),
  });
  if (found.length > 0) throw new OvercommitError(`placement refused, it would overcommit: ${found.join('; ')}`);
}
