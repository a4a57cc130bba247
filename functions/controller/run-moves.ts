import { eq, inArray, sql } from 'drizzle-orm';
import type { PgUpdateSetSource } from 'drizzle-orm/pg-core';
import { runs, runWorkers } from '../store/schema/index.js';
import type { Db } from '../store/db.js';
import { runTransition, workerTransition, type RunState } from '../core/runs/states.js';
import { recordRunEvents, type NewRunEvent } from '../services/run-events.js';
import { releaseWorkers } from '../services/run-holds.js';

export type RunRow = typeof runs.$inferSelect;
export type WorkerRow = typeof runWorkers.$inferSelect;

/** The controller's writes to one run and its workers in a pass, and the machines whose desired state they change. */
export interface RunWrites {
  db: Db;
  touched: Set<string>;
}

const FINAL: ReadonlySet<string> = new Set(['completed', 'failed']);

/** Moves the run (the controller's decision, or following its workers), with its event; refused moves change nothing. */
export async function moveRun(
  w: RunWrites,
  run: RunRow,
  to: RunState,
  reason: string,
  origin: 'controller' | 'workers',
  set: PgUpdateSetSource<typeof runs> = {},
) {
  const move = runTransition(run.id, run.state as RunState, to, reason, origin);
  if ('refused' in move) return false;
  await w.db
    .update(runs)
    .set({ ...set, state: to, reason: to === 'failed' || to === 'pending' || to === 'completed' ? reason : null })
    .where(eq(runs.id, run.id));
  await recordRunEvents(w.db, [{ runId: run.id, workerId: null, event: move.event }]);
  run.state = to;
  return true;
}

/** Releases reservations (a worker that ended, or every worker of a run sent back or ended): its machine drops it. */
export async function release(w: RunWrites, workers: readonly WorkerRow[]) {
  const held = workers.filter((x) => x.releasedAt === null && x.machineId !== null);
  if (held.length === 0) return;
  const machineIds = await releaseWorkers(
    w.db,
    inArray(
      runWorkers.id,
      held.map((x) => x.id),
    ),
  );
  for (const machineId of machineIds) w.touched.add(machineId);
}

/** Fails the run (its policy, a gang's template gone): its live workers fail with it and every reservation goes. */
export async function failRun(w: RunWrites, run: RunRow, workers: readonly WorkerRow[], reason: string) {
  const events: NewRunEvent[] = [];
  for (const worker of workers) {
    const move = workerTransition(worker.name, worker.state as RunState, 'failed', `its run failed: ${reason}`, 'controller');
    if ('event' in move) events.push({ runId: run.id, workerId: worker.id, event: move.event });
  }
  const live = workers.filter((x) => !FINAL.has(x.state)).map((x) => x.id);
  if (live.length > 0) await w.db.update(runWorkers).set({ state: 'failed', restartAt: null }).where(inArray(runWorkers.id, live));
  await w.db.update(runWorkers).set({ restartAt: null }).where(eq(runWorkers.runId, run.id));
  await recordRunEvents(w.db, events);
  await release(w, workers);
  await moveRun(w, run, 'failed', reason, 'controller', { finishedAt: sql`now()`, position: null });
}

/**
 * Sends the run back to the queue (a gang that did not assemble, a run restarted): every worker stops, is released
 * and waits again as a new attempt; nothing is placed for it before `notBefore`. A restart waits from now (aging
 * counts again); a released gang keeps its `waitingSince`, so that it still ages.
 */
export async function requeue(
  w: RunWrites,
  run: RunRow,
  workers: readonly WorkerRow[],
  input: { reason: string; delayMs: number; restarts: number; restart: boolean },
) {
  const events: NewRunEvent[] = [];
  for (const worker of workers) {
    const move = workerTransition(worker.name, worker.state as RunState, 'pending', input.reason, 'controller');
    if ('event' in move) events.push({ runId: run.id, workerId: worker.id, event: move.event });
  }
  await release(w, workers);
  await w.db
    .update(runWorkers)
    .set({
      state: 'pending',
      machineId: null,
      command: null,
      phase: 'prepare',
      exitCode: null,
      message: null,
      restartAt: null,
      attempt: sql`${runWorkers.attempt} + 1`,
    })
    .where(eq(runWorkers.runId, run.id));
  await recordRunEvents(w.db, events);
  await moveRun(w, run, 'pending', input.reason, 'controller', {
    restarts: input.restarts,
    admittedAt: null,
    notBefore: input.delayMs > 0 ? sql`now() + make_interval(secs => ${input.delayMs / 1000})` : null,
    ...(input.restart ? { waitingSince: sql`now()` } : {}),
  });
}
