import { and, eq, gt, inArray, isNotNull, isNull, lt, sql, type SQL } from 'drizzle-orm';
import { runHolds, runs, runWorkers } from '../store/schema/index.js';
import type { Db } from '../store/db.js';
import { gpuSecondsInWindow, type GpuHold } from '../core/runs/fair-share.js';

/**
 * Releases the held workers `where` selects (their reservations end now) and keeps each one's hold of GPUs, from
 * its placement to now, for the fair share (`run_holds`). Returns the machines they were on, for their desired
 * state. The one way a worker's reservation ends.
 */
export async function releaseWorkers(db: Db, where: SQL): Promise<string[]> {
  const released = await db
    .update(runWorkers)
    .set({ releasedAt: sql`now()` })
    .where(and(where, isNull(runWorkers.releasedAt)))
    .returning({
      id: runWorkers.id,
      runId: runWorkers.runId,
      machineId: runWorkers.machineId,
      gpus: sql<number>`(${runWorkers.resources}->>'gpus')::int`,
      placedAt: runWorkers.placedAt,
      releasedAt: runWorkers.releasedAt,
    });
  const held = released.filter((w) => w.placedAt !== null && w.releasedAt !== null && Number(w.gpus) > 0);
  if (held.length > 0) {
    const owners = await db
      .select({ id: runs.id, workspaceId: runs.workspaceId })
      .from(runs)
      .where(
        inArray(
          runs.id,
          held.map((w) => w.runId),
        ),
      );
    const workspaceOf = new Map(owners.map((r) => [r.id, r.workspaceId]));
    await db
      .insert(runHolds)
      .values(
        held.map((w) => ({
          workspaceId: workspaceOf.get(w.runId)!,
          runId: w.runId,
          workerId: w.id,
          gpus: Number(w.gpus),
          heldFrom: w.placedAt!,
          heldTo: w.releasedAt!,
        })),
      )
      .onConflictDoNothing();
  }
  return [...new Set(released.flatMap((w) => (w.machineId ? [w.machineId] : [])))];
}

/**
 * GPU-seconds each workspace's run workers held within the window ending at `now`: the holds given back (run_holds)
 * and the reservations still held, each counted for what overlaps the window (`gpuSecondsInWindow`).
 */
export async function loadGpuSeconds(db: Db, now: Date, windowMs: number): Promise<Map<string, number>> {
  const start = new Date(now.getTime() - windowMs);
  const closed = await db
    .select({ workspaceId: runHolds.workspaceId, gpus: runHolds.gpus, from: runHolds.heldFrom, to: runHolds.heldTo })
    .from(runHolds)
    .where(gt(runHolds.heldTo, start));
  const open = await db
    .select({ workspaceId: runs.workspaceId, gpus: sql<number>`(${runWorkers.resources}->>'gpus')::int`, from: runWorkers.placedAt })
    .from(runWorkers)
    .innerJoin(runs, eq(runs.id, runWorkers.runId))
    .where(and(isNull(runWorkers.releasedAt), isNotNull(runWorkers.placedAt)));
  const holds: GpuHold[] = [
    ...closed.map((h) => ({ workspaceId: h.workspaceId, gpus: h.gpus, from: h.from.getTime(), to: h.to.getTime() })),
    ...open.map((h) => ({ workspaceId: h.workspaceId, gpus: Number(h.gpus), from: h.from!.getTime(), to: null })),
  ];
  return gpuSecondsInWindow(holds, now.getTime(), windowMs);
}

/** Drops the holds that ended before every window the queue could look back over now (`keepMs` before `now`). */
export async function pruneRunHolds(db: Db, now: Date, keepMs: number): Promise<void> {
  await db.delete(runHolds).where(lt(runHolds.heldTo, new Date(now.getTime() - keepMs)));
}

/** What the held workers of each workspace's runs reserve now, wherever they run: GPUs, memory and cores. */
export async function loadWorkerUsage(db: Db, workspaceIds: readonly string[]): Promise<Map<string, { gpus: number; memoryMiB: number; cores: number }>> {
  if (workspaceIds.length === 0) return new Map();
  const rows = await db
    .select({
      id: runs.workspaceId,
      gpus: sql<string>`coalesce(sum((${runWorkers.resources}->>'gpus')::numeric), 0)`,
      memoryMiB: sql<string>`coalesce(sum((${runWorkers.resources}->>'memoryMiB')::numeric), 0)`,
      cores: sql<string>`coalesce(sum((${runWorkers.resources}->>'cores')::numeric), 0)`,
    })
    .from(runWorkers)
    .innerJoin(runs, eq(runs.id, runWorkers.runId))
    .where(and(inArray(runs.workspaceId, [...workspaceIds]), isNull(runWorkers.releasedAt), isNotNull(runWorkers.machineId)))
    .groupBy(runs.workspaceId);
  return new Map(rows.map((r) => [r.id, { gpus: Number(r.gpus), memoryMiB: Number(r.memoryMiB), cores: Number(r.cores) }]));
}
