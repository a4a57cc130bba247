import { and, eq, inArray, isNull } from 'drizzle-orm';
import { runs, runWorkers } from '../store/schema/index.js';
import type { Db } from '../store/db.js';
import type { WorkerReport } from '../../shared/contracts/worker.js';
import { reportedMoves } from '../core/runs/reports.js';
import type { RunState } from '../core/runs/states.js';
import { recordRunEvents, type NewRunEvent } from './run-events.js';

/**
 * Takes a machine's reports of its run workers, in its heartbeat's transaction: only of workers placed on this very
 * machine, not released, of a live run, and of their current attempt (a machine acts only for itself; a report of an
 * older attempt speaks of a process already replaced). Each move is an event (`reportedMoves`). Reports of any other
 * worker, and moves no path allows, are ignored and counted.
 */
export async function applyWorkerReports(db: Db, machineId: string, reports: readonly WorkerReport[]): Promise<{ changed: boolean; ignored: number }> {
  if (reports.length === 0) return { changed: false, ignored: 0 };
  const rows = await db
    .select({ worker: runWorkers })
    .from(runWorkers)
    .innerJoin(runs, eq(runs.id, runWorkers.runId))
    .where(
      and(
        inArray(
          runWorkers.id,
          reports.map((r) => r.workerId),
        ),
        eq(runWorkers.machineId, machineId),
        isNull(runWorkers.releasedAt),
        isNull(runs.finishedAt),
      ),
    )
    .for('update', { of: runWorkers });
  const byId = new Map(rows.map((r) => [r.worker.id, r.worker]));
  const events: NewRunEvent[] = [];
  let ignored = 0;
  for (const report of reports) {
    const worker = byId.get(report.workerId);
    if (!worker || worker.attempt !== report.attempt) {
      ignored += 1;
      continue;
    }
    const moves = reportedMoves({
      id: worker.name,
      from: worker.state as RunState,
      reported: report.state,
      phase: worker.phase,
      exitCode: report.exitCode,
      message: report.message,
    });
    if ('refused' in moves) {
      ignored += 1;
      continue;
    }
    if (moves.events.length === 0) continue;
    await db.update(runWorkers).set({ state: report.state, exitCode: report.exitCode, message: report.message }).where(eq(runWorkers.id, worker.id));
    events.push(...moves.events.map((event) => ({ runId: worker.runId, workerId: worker.id, event })));
  }
  await recordRunEvents(db, events);
  return { changed: events.length > 0, ignored };
}
