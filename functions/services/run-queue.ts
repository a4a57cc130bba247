import { and, asc, eq, inArray, isNull, lte } from 'drizzle-orm';
import { runs, workspaces } from '../store/schema/index.js';
import type { Db } from '../store/db.js';
import { WorkspacePolicy } from '../../shared/contracts/placement.js';
import { placementFields, type FleetSnapshot } from '../core/fleet/snapshot.js';
import type { CandidateMachine } from '../core/scheduler/place.js';
import { runDemand } from '../core/runs/demand.js';
import { admissionPass, DEFAULT_AGING_MS, type AdmissionResult, type QueuedRun, type QueueWorkspace } from '../core/runs/queue.js';

type RunRow = typeof runs.$inferSelect;
type WorkspaceRow = typeof workspaces.$inferSelect;

/** A workspace's machines as the admission pass sees them. */
function candidates(snapshot: FleetSnapshot, workspaceId: string): CandidateMachine[] {
  return snapshot.machines
    .filter((m) => m.workspaceId === workspaceId)
    .map((m) => ({
      ...placementFields(m),
      load: 0,
      reserved: m.reserved,
      deploymentIds: new Set<string>(),
      replicaFailures: new Map<string, string>(),
    }));
}

/** A workspace as the admission pass sees it: its weight, ceiling and quota, and what its machines reserve now. */
function queueWorkspace(snapshot: FleetSnapshot, workspace: WorkspaceRow): QueueWorkspace {
  const mine = snapshot.machines.filter((m) => m.workspaceId === workspace.id);
  return {
    id: workspace.id,
    weight: workspace.runWeight,
    priorityCeiling: workspace.runPriorityCeiling,
    quota: WorkspacePolicy.parse(workspace.policy).quota,
    usage: {
      gpus: mine.reduce((s, m) => s + m.reserved.gpus, 0),
      memoryMiB: mine.reduce((s, m) => s + m.reserved.memoryMiB, 0),
      replicas: mine.reduce((s, m) => s + m.reserved.assignments, 0),
    },
    // Fair share orders runs of different workspaces; a pass decides one workspace's queue, where it ties.
    gpuSeconds: 0,
  };
}

/**
 * The admission pass over `queued` (runs of `workspace`, or workers of one placed again as runs of one worker) on
 * the snapshot's machines of that workspace: placement never crosses a workspace. Decides; writes nothing.
 */
export function workspaceQueuePass(snapshot: FleetSnapshot, workspace: WorkspaceRow, queued: readonly QueuedRun[]): AdmissionResult {
  return admissionPass({
    now: snapshot.now.getTime(),
    runs: queued,
    workspaces: [queueWorkspace(snapshot, workspace)],
    machines: candidates(snapshot, workspace.id),
  });
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
 * The machines of the snapshot held for aged runs, machine id to run id, as the queue's pass on this snapshot would
 * hold them (docs/runs.md, "Aging"): the replicas' placement reads them before it places, in the same pass, so
 * that it does not backfill what the runs' pass then holds. Made again each time, nothing stored. A fleet without
 * an aged run costs one read.
 */
export async function loadRunHolds(db: Db, snapshot: FleetSnapshot): Promise<Map<string, string>> {
  const holds = new Map<string, string>();
  const workspaceIds = [...new Set(snapshot.machines.map((m) => m.workspaceId))];
  if (workspaceIds.length === 0) return holds;
  const pending = and(isNull(runs.finishedAt), eq(runs.state, 'pending'), inArray(runs.workspaceId, workspaceIds));
  const [aged] = await db
    .select({ id: runs.id })
    .from(runs)
    .where(and(pending, lte(runs.waitingSince, new Date(snapshot.now.getTime() - DEFAULT_AGING_MS))))
    .limit(1);
  if (!aged) return holds;
  const waiting = await db.select().from(runs).where(pending).orderBy(asc(runs.id));
  const workspaceRows = await db
    .select()
    .from(workspaces)
    .where(inArray(workspaces.id, [...new Set(waiting.map((r) => r.workspaceId))]));
  for (const workspace of workspaceRows) {
    const result = workspaceQueuePass(snapshot, workspace, waiting.filter((r) => r.workspaceId === workspace.id).map(queuedRun));
    for (const wait of result.waiting) for (const machineId of wait.holds) holds.set(machineId, wait.runId);
  }
  return holds;
}
