import { isNull } from 'drizzle-orm';
import { runs } from '../store/schema/index.js';
import type { Db } from '../store/db.js';
import type { ControlPlaneConfig } from '../kernel/config.js';
import type { FleetSnapshot } from '../core/fleet/snapshot.js';
import { replacementPause } from '../core/fleet/lost-machines.js';
import { loadFleetSnapshot } from '../services/fleet-load.js';
import { dbNow } from '../store/rows.js';
import { admitRuns, replaceWorkers } from './run-admission.js';
import { progressRuns, type FleetSight } from './run-progress.js';
import { recheckReservations } from './recheck.js';

/** The pass's judgement of the machines, as the replicas' reconciler made it: liveness, and the partition pause. */
function sightOf(snapshot: FleetSnapshot, config: Pick<ControlPlaneConfig, 'replacementPauseFraction'>): FleetSight {
  const byId = new Map(snapshot.machines.map((m) => [m.id, m]));
  const paused = new Map<string, string | null>();
  return {
    machine: (id) => byId.get(id) ?? null,
    paused: (workspaceId) => {
      if (!paused.has(workspaceId)) {
        const machines = snapshot.machines.filter((m) => m.workspaceId === workspaceId);
        paused.set(workspaceId, replacementPause(machines, config.replacementPauseFraction));
      }
      return paused.get(workspaceId)!;
    },
  };
}

/**
 * The runs' share of a reconcile pass, in its transaction and under its lock, after the replicas' (docs/runs.md):
 * admitted runs move on (their machines' liveness as `snapshot`, the pass's, judged it; failures, restarts, the
 * start barrier, completion), then workers restarting elsewhere are placed again and the queue admits what now
 * fits, each on a snapshot read after the writes before it, and the placement is re-checked against the store's
 * sums with the replicas'. Returns the machines whose workers changed. A plane without live runs reads one row.
 */
export async function reconcileRuns(db: Db, config: ControlPlaneConfig, snapshot: FleetSnapshot): Promise<Set<string>> {
  const w = { db, touched: new Set<string>() };
  const [live] = await db.select({ id: runs.id }).from(runs).where(isNull(runs.finishedAt)).limit(1);
  if (!live) return w.touched;
  await progressRuns(w, await dbNow(db), sightOf(snapshot, config));
  let fleet = await loadFleetSnapshot(db, config);
  const replacedIn = await replaceWorkers(w, config, fleet);
  // What the workers placed again took, the queue no longer has.
  if (replacedIn.size > 0) fleet = await loadFleetSnapshot(db, config);
  const placedIn = await admitRuns(w, config, fleet);
  await recheckReservations(db, { machineIds: [...w.touched], workspaceIds: [...replacedIn, ...placedIn] });
  return w.touched;
}
