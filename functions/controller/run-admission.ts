import { and, asc, eq, isNull, ne, sql } from 'drizzle-orm';
import { runs, runWorkers } from '../store/schema/index.js';
import type { ControlPlaneConfig } from '../kernel/config.js';
import type { TemplateRuntime } from '../../shared/contracts/desired.js';
import type { FleetSnapshot } from '../core/fleet/snapshot.js';
import { runDemand } from '../core/runs/demand.js';
import { localRankOn, workerEnvironments } from '../core/runs/env.js';
import type { QueuedRun } from '../core/runs/queue.js';
import { queuedRun, queuePass } from '../services/run-queue.js';
import { resolveRuntime } from '../core/registry/resolve.js';
import { loadRuntimeRegistry } from '../services/runtime-registry.js';
import { runRuntime } from '../services/runs.js';
import { failRun, moveRun, type RunRow, type RunWrites } from './run-moves.js';

type QueueConfig = Pick<ControlPlaneConfig, 'runFairShareWindowMs'>;

/**
 * Workers of admitted runs restarting elsewhere (their machine went down, `restart-worker`) that wait unplaced:
 * each is placed as a run of one worker would be, by the same admission pass (the workspace's quota, the
 * selector, the shape), its run's workers where they are. It keeps its command, but for LOCAL_RANK on its new
 * machine: rank 0 never moves alone (the failure policy restarts the run instead), so MASTER_ADDR still holds. One
 * that does not fit waits, its run saying why. Returns the workspaces it placed in, for the caller's re-check.
 */
export async function replaceWorkers(w: RunWrites, config: QueueConfig, snapshot: FleetSnapshot): Promise<Set<string>> {
  const rows = await w.db
    .select({ worker: runWorkers, run: runs })
    .from(runWorkers)
    .innerJoin(runs, eq(runs.id, runWorkers.runId))
    .where(and(isNull(runs.finishedAt), ne(runs.state, 'pending'), eq(runWorkers.state, 'pending'), isNull(runWorkers.machineId)))
    .orderBy(asc(runs.id), asc(runWorkers.rank))
    // Locked, as the queue's runs are (`admitRuns`): a cancel either ends the run first or waits for this pass.
    .for('update');
  const placedIn = new Set<string>();
  if (rows.length === 0) return placedIn;
  const result = await queuePass(
    w.db,
    config,
    snapshot,
    rows.map(({ worker, run }): QueuedRun => {
      const { gpuMemoryMiB } = runDemand(run.spec).find((g) => g.name === worker.group)!.need;
      return {
        id: worker.id,
        workspaceId: run.workspaceId,
        priority: run.priority,
        submittedAt: run.submittedAt.getTime(),
        waitingSince: run.waitingSince.getTime(),
        notBefore: null,
        groups: [{ name: worker.group, workers: 1, need: { ...worker.resources, gpuMemoryMiB } }],
        selector: run.spec.selector,
      };
    }),
  );
  const rowOf = new Map(rows.map((r) => [r.worker.id, r]));
  for (const wait of result.waiting) {
    const { worker, run } = rowOf.get(wait.runId)!;
    await w.db
      .update(runs)
      .set({ reason: `worker ${worker.name} waits to be placed again: ${wait.reason}` })
      .where(eq(runs.id, run.id));
  }
  for (const admitted of result.admitted) {
    const { worker, run } = rowOf.get(admitted.runId)!;
    const machineId = admitted.workers[0]!.machineId;
    const others = await w.db.select({ rank: runWorkers.rank, machineId: runWorkers.machineId }).from(runWorkers).where(eq(runWorkers.runId, worker.runId));
    const env = { ...worker.command!.env, LOCAL_RANK: String(localRankOn(machineId, worker.rank, others)) };
    await w.db
      .update(runWorkers)
      .set({ machineId, placedAt: sql`now()`, releasedAt: null, command: { ...worker.command!, env } })
      .where(eq(runWorkers.id, worker.id));
    w.touched.add(machineId);
    placedIn.add(run.workspaceId);
  }
  return placedIn;
}

/**
 * The queue's admission pass over every waiting run, one queue for the fleet (`queuePass`), then the writes: an
 * admitted run's workers get their machine, their resolved command with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR
 * (rank 0's machine's reported address, its name when it reports none) and MASTER_PORT, and their phase (`prepare`
 * for a gang, `start` otherwise); a waiting run gets its reason and position. Returns the workspaces it placed in,
 * for the caller's re-check.
 */
export async function admitRuns(w: RunWrites, config: QueueConfig, snapshot: FleetSnapshot): Promise<Set<string>> {
  const waiting = await w.db
    .select()
    .from(runs)
    .where(and(isNull(runs.finishedAt), eq(runs.state, 'pending')))
    .orderBy(asc(runs.id))
    // Locked for the pass: a run cancelled meanwhile (its cancel locks it) is either gone from this read or waits
    // for the pass to commit, never overwritten by the pass's reason or placement.
    .for('update');
  const placedIn = new Set<string>();
  if (waiting.length === 0) return placedIn;
  const result = await queuePass(w.db, config, snapshot, waiting.map(queuedRun));
  const runById = new Map(waiting.map((r) => [r.id, r]));
  for (const wait of result.waiting) {
    await w.db.update(runs).set({ reason: wait.reason, position: wait.position }).where(eq(runs.id, wait.runId));
  }
  if (result.admitted.length === 0) return placedIn;
  const registry = await loadRuntimeRegistry(w.db);
  const addressOf = new Map(snapshot.machines.map((m) => [m.id, m.address ?? m.name]));
  for (const admitted of result.admitted) {
    const run = runById.get(admitted.runId)!;
    await placeRun(w, run, admitted.workers, addressOf, registry);
    placedIn.add(run.workspaceId);
  }
  return placedIn;
}

async function placeRun(
  w: RunWrites,
  run: RunRow,
  placed: ReadonlyArray<{ group: string | null; rank: number; machineId: string }>,
  addressOf: ReadonlyMap<string, string>,
  registry: Awaited<ReturnType<typeof loadRuntimeRegistry>>,
) {
  const workers = await w.db.select().from(runWorkers).where(eq(runWorkers.runId, run.id)).orderBy(asc(runWorkers.rank));
  const resolved = resolveRuntime({ workspaceId: run.workspaceId, runtime: runRuntime(run.spec), registry });
  if (!resolved.ok || resolved.value.runtime.kind !== 'template') {
    const why = resolved.ok ? 'not a template' : resolved.issues[0]!.message;
    await failRun(w, run, workers, `its template does not resolve: ${why}`);
    return;
  }
  const command: TemplateRuntime = resolved.value.runtime;
  const environments = workerEnvironments({ run: run.name, workers: placed.map((p) => ({ ...p, gpuIndices: [] })), addressOf });
  const phase = run.spec.gang === null ? 'start' : 'prepare';
  for (const [rank, environment] of environments.entries()) {
    // The agent sets CUDA_VISIBLE_DEVICES from the GPUs it gives the worker (shared/contracts/desired.ts).
    const { CUDA_VISIBLE_DEVICES: _, ...env } = environment.env;
    await w.db
      .update(runWorkers)
      .set({ machineId: environment.machineId, placedAt: sql`now()`, releasedAt: null, command: { ...command, env: { ...command.env, ...env } }, phase })
      .where(eq(runWorkers.id, workers[rank]!.id));
    w.touched.add(environment.machineId);
  }
  const machinesUsed = [...new Set(placed.map((p) => p.machineId))].length;
  await moveRun(w, run, 'preparing', `placed on ${machinesUsed} ${machinesUsed === 1 ? 'machine' : 'machines'}`, 'controller', {
    admittedAt: sql`now()`,
    position: null,
    notBefore: null,
  });
}
