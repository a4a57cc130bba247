import { and, count, eq, inArray, isNull, sql } from 'drizzle-orm';
import { assignments, deployments, machines, runWorkers, workspaces } from '../store/schema/index.js';
import type { Db } from '../store/db.js';
import type { Inventory } from '../../shared/contracts/inventory.js';
import { WorkspacePolicy } from '../../shared/contracts/placement.js';
import { machineMemoryMiB } from '../core/scheduler/place.js';
import { loadWorkerUsage } from '../services/run-holds.js';

/** A reconcile pass that would overcommit a machine or a quota: thrown in its transaction, which then rolls back. */
export class OvercommitError extends Error {
  override name = 'OvercommitError';
}

interface Sums {
  gpus: number;
  memoryMiB: number;
  cores: number;
}

/**
 * What the store's sums say is overcommitted: a machine whose live assignments and run workers reserve more GPUs,
 * memory or cores than its inventory offers (memory as the scheduler counts it, `machineMemoryMiB`), a workspace
 * past its quota (its `replicas` bound counts replicas only). Pure.
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
    if (m.cores > m.inventory.cpus) found.push(`machine ${m.name}: ${m.cores} cores reserved, it has ${m.inventory.cpus}`);
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

const workerReserved = {
  gpus: sql<string>`coalesce(sum((${runWorkers.resources}->>'gpus')::numeric), 0)`,
  memoryMiB: sql<string>`coalesce(sum((${runWorkers.resources}->>'memoryMiB')::numeric), 0)`,
  cores: sql<string>`coalesce(sum((${runWorkers.resources}->>'cores')::numeric), 0)`,
};

const holding = isNull(runWorkers.releasedAt);

/** Replicas' sums and workers' sums of one key, added: the one accounting they share. */
function added(
  replicas: ReadonlyArray<{ id: string; gpus: string; memoryMiB: string }>,
  workers: ReadonlyArray<{ id: string | null; gpus: string | number; memoryMiB: string | number; cores: string | number }>,
): Map<string, Sums> {
  const sums = new Map<string, Sums>();
  for (const r of replicas) sums.set(r.id, { gpus: Number(r.gpus), memoryMiB: Number(r.memoryMiB), cores: 0 });
  for (const w of workers) {
    if (w.id === null) continue;
    const sum = sums.get(w.id) ?? { gpus: 0, memoryMiB: 0, cores: 0 };
    sums.set(w.id, { gpus: sum.gpus + Number(w.gpus), memoryMiB: sum.memoryMiB + Number(w.memoryMiB), cores: sum.cores + Number(w.cores) });
  }
  return sums;
}

/**
 * The re-check of docs/design.md section 6, in the placing transaction after its inserts: sums what the live
 * assignments (from each assignment's signed spec) and the held run workers of the machines it placed on, and of
 * their workspaces, reserve, against the machines' inventories and the workspaces' quotas. Throws
 * `OvercommitError` (the whole pass rolls back) on any excess. The pure reconciler and the run queue already refuse
 * such placements and passes are serialised by their lock: this catches a bug or a writer outside the lock, before
 * it reaches a machine.
 */
export async function recheckReservations(db: Db, touched: { machineIds: readonly string[]; workspaceIds: readonly string[] }): Promise<void> {
  if (touched.machineIds.length === 0 && touched.workspaceIds.length === 0) return;
  const machineIds = [...touched.machineIds];
  const workspaceIds = [...touched.workspaceIds];
  const machineRows = machineIds.length
    ? await db
        .select({ id: machines.id, name: machines.name, inventory: machines.inventory, ...reserved })
        .from(machines)
        .leftJoin(assignments, and(eq(assignments.machineId, machines.id), isNull(assignments.removedAt)))
        .where(inArray(machines.id, machineIds))
        .groupBy(machines.id)
    : [];
  const machineWorkers = machineIds.length
    ? await db
        .select({ id: runWorkers.machineId, ...workerReserved })
        .from(runWorkers)
        .where(and(inArray(runWorkers.machineId, machineIds), holding))
        .groupBy(runWorkers.machineId)
    : [];
  const workspaceRows = workspaceIds.length
    ? await db
        .select({ id: workspaces.id, policy: workspaces.policy, replicas: count(assignments.id), ...reserved })
        .from(workspaces)
        .leftJoin(deployments, eq(deployments.workspaceId, workspaces.id))
        .leftJoin(assignments, and(eq(assignments.deploymentId, deployments.id), isNull(assignments.removedAt)))
        .where(inArray(workspaces.id, workspaceIds))
        .groupBy(workspaces.id)
    : [];
  const workspaceWorkers = await loadWorkerUsage(db, workspaceIds);
  const byMachine = added(machineRows, machineWorkers);
  const byWorkspace = added(
    workspaceRows,
    [...workspaceWorkers].map(([id, sums]) => ({ id, ...sums })),
  );
  const found = overcommits({
    machines: machineRows.map((m) => ({ ...m, ...byMachine.get(m.id)! })),
    workspaces: workspaceRows.map((w) => ({ ...w, ...byWorkspace.get(w.id)!, policy: WorkspacePolicy.parse(w.policy) })),
  });
  if (found.length > 0) throw new OvercommitError(`placement refused, it would overcommit: ${found.join('; ')}`);
}
