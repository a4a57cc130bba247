import { and, asc, count, eq, inArray, isNull, lte } from 'drizzle-orm';
import { runs, workspaces } from '../store/schema/index.js';
import type { Db } from '../store/db.js';
import type { ControlPlaneConfig } from '../kernel/config.js';
import { WorkspacePolicy } from '../../shared/contracts/placement.js';
import { placementFields, type FleetSnapshot } from '../core/fleet/snapshot.js';
import type { QueueMachine } from '../core/runs/hosts.js';
import { runDemand } from '../core/runs/demand.js';
import { admissionPass, DEFAULT_AGING_MS, type AdmissionResult, type QueuedRun, type QueueWorkspace } from '../core/runs/queue.js';
import { loadFleetSnapshot } from './fleet-load.js';
import { loadGpuSeconds, loadWorkerUsage } from './run-holds.js';
import type { RunQueueStanding } from '../../shared/contracts/run-view.js';
import { fairShare } from '../core/runs/fair-share.js';
import { dbNow } from '../store/rows.js';
import type { ServiceCtx, ServicePorts } from './service-context.js';

type RunRow = typeof runs.$inferSelect;

/** Every machine of the snapshot as the admission pass sees it: whose it is, and whether it is shared. */
function candidates(snapshot: FleetSnapshot): QueueMachine[] {
  return snapshot.machines.map((m) => ({
    ...placementFields(m),
    workspaceId: m.workspaceId,
    shared: m.shared,
    load: 0,
    reserved: m.reserved,
    deploymentIds: new Set<string>(),
    replicaFailures: new Map<string, string>(),
  }));
}

/**
 * The workspaces of `workspaceIds` as the admission pass sees them: weight, ceiling and quota; what they reserve
 * now (the replicas on their machines, and their runs' workers wherever those run); their GPU-seconds in the
 * fair-share window.
 */
async function loadQueueWorkspaces(
  db: Db,
  config: Pick<ControlPlaneConfig, 'runFairShareWindowMs'>,
  snapshot: FleetSnapshot,
  workspaceIds: readonly string[],
): Promise<QueueWorkspace[]> {
  if (workspaceIds.length === 0) return [];
  const rows = await db
    .select()
    .from(workspaces)
    .where(inArray(workspaces.id, [...workspaceIds]));
  const workers = await loadWorkerUsage(db, workspaceIds);
  const gpuSeconds = await loadGpuSeconds(db, snapshot.now, config.runFairShareWindowMs);
  return rows.map((workspace) => {
    const own = snapshot.machines.filter((m) => m.workspaceId === workspace.id);
    const used = workers.get(workspace.id) ?? { gpus: 0, memoryMiB: 0, cores: 0 };
    return {
      id: workspace.id,
      weight: workspace.runWeight,
      priorityCeiling: workspace.runPriorityCeiling,
      quota: WorkspacePolicy.parse(workspace.policy).quota,
      usage: {
        gpus: used.gpus + own.reduce((s, m) => s + m.reserved.gpus - m.workers.gpus, 0),
        memoryMiB: used.memoryMiB + own.reduce((s, m) => s + m.reserved.memoryMiB - m.workers.memoryMiB, 0),
        replicas: own.reduce((s, m) => s + m.reserved.assignments, 0),
      },
      gpuSeconds: gpuSeconds.get(workspace.id) ?? 0,
    };
  });
}

/**
 * The admission pass over `queued` (waiting runs, or workers placed again as runs of one worker) on every machine
 * of the snapshot, one queue for the whole fleet: a run reaches its workspace's machines and the shared ones, and
 * runs of workspaces competing for shared machines are ordered by fair share. Decides; writes nothing.
 */
export async function queuePass(
  db: Db,
  config: Pick<ControlPlaneConfig, 'runFairShareWindowMs'>,
  snapshot: FleetSnapshot,
  queued: readonly QueuedRun[],
): Promise<AdmissionResult> {
  const workspaceRows = await loadQueueWorkspaces(db, config, snapshot, [...new Set(queued.map((r) => r.workspaceId))]);
  return admissionPass({ now: snapshot.now.getTime(), runs: queued, workspaces: workspaceRows, machines: candidates(snapshot) });
}

/** A waiting run as the admission pass takes it. */
export function queuedRun(r: RunRow): QueuedRun {
  return {
    id: r.id,
    workspaceId: r.workspaceId,
    priority: r.priority,
    submittedAt: r.submittedAt.getTime(),
    waitingSince: r.waitingSince.getTime(),
    notBefore: r.notBefore?.getTime() ?? null,
    groups: runDemand(r.spec),
    selector: r.spec.selector,
  };
}

/**
 * The machines held for aged runs, machine id to run id, as the queue's pass over the whole fleet would hold them
 * (docs/runs.md, "Aging"): the replicas' placement reads them before it places, in the same pass, so that it does
 * not backfill what the runs' pass then holds. Made again each time, nothing stored. A fleet without an aged run
 * costs one read; with one, the whole fleet is needed (one workspace's machines do not order the queue): `fleet`,
 * when the caller read it whole, or read here.
 */
export async function loadRunHolds(db: Db, config: ControlPlaneConfig, now: Date, fleet?: FleetSnapshot): Promise<Map<string, string>> {
  const holds = new Map<string, string>();
  const pending = and(isNull(runs.finishedAt), eq(runs.state, 'pending'));
  const [aged] = await db
    .select({ id: runs.id })
    .from(runs)
    .where(and(pending, lte(runs.waitingSince, new Date(now.getTime() - DEFAULT_AGING_MS))))
    .limit(1);
  if (!aged) return holds;
  const waiting = await db.select().from(runs).where(pending).orderBy(asc(runs.id));
  const result = await queuePass(db, config, fleet ?? (await loadFleetSnapshot(db, config)), waiting.map(queuedRun));
  for (const wait of result.waiting) for (const machineId of wait.holds) holds.set(machineId, wait.runId);
  return holds;
}

/**
 * Where the workspace stands in the fleet's run queue: its GPU-seconds in the fair-share window, its share, and its
 * rank by share among the workspaces whose runs wait (ties by id, as the queue breaks none: equal shares fall to
 * submission time). Other workspaces are counted, never named.
 */
export async function queueStanding({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'config'>;
  input: { workspaceId: string };
}): Promise<RunQueueStanding> {
  const now = await dbNow(ctx.db);
  const [workspace] = await ctx.db.select().from(workspaces).where(eq(workspaces.id, input.workspaceId));
  const waitingBy = await ctx.db
    .select({ workspaceId: runs.workspaceId, waiting: count() })
    .from(runs)
    .where(and(isNull(runs.finishedAt), eq(runs.state, 'pending')))
    .groupBy(runs.workspaceId);
  const weights = waitingBy.length
    ? await ctx.db
        .select({ id: workspaces.id, weight: workspaces.runWeight })
        .from(workspaces)
        .where(
          inArray(
            workspaces.id,
            waitingBy.map((w) => w.workspaceId),
          ),
        )
    : [];
  const seconds = await loadGpuSeconds(ctx.db, now, ctx.config.runFairShareWindowMs);
  const shareOf = (id: string, weight: number) => fairShare(seconds.get(id) ?? 0, weight);
  const weight = workspace?.runWeight ?? 1;
  const share = shareOf(input.workspaceId, weight);
  const waiting = waitingBy.find((w) => w.workspaceId === input.workspaceId)?.waiting ?? 0;
  const ahead = weights.filter(
    (w) => w.id !== input.workspaceId && (shareOf(w.id, w.weight) < share || (shareOf(w.id, w.weight) === share && w.id < input.workspaceId)),
  );
  const held = (await loadWorkerUsage(ctx.db, [input.workspaceId])).get(input.workspaceId);
  return {
    windowMs: ctx.config.runFairShareWindowMs,
    weight,
    priorityCeiling: workspace?.runPriorityCeiling ?? 0,
    gpuSeconds: Math.round(seconds.get(input.workspaceId) ?? 0),
    share: Math.round(share),
    waiting,
    gpusHeld: held?.gpus ?? 0,
    competing: weights.length,
    rank: waiting > 0 ? ahead.length + 1 : null,
  };
}
