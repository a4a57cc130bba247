import { PROCESS_NOT_FOUND } from '../../shared/contracts/worker.js';
import { and, asc, eq, inArray, isNull, notInArray, sql } from 'drizzle-orm';
import { runs, runWorkers } from '../store/schema/index.js';
import { decideFailure, type WorkerFailure } from '../core/runs/failure.js';
import { startDecision } from '../core/runs/gang.js';
import { deriveRunState, workerTransition, type RunState } from '../core/runs/states.js';
import { MACHINE_DOWN, sightMoves } from '../core/runs/sight.js';
import type { MachineLiveness } from '../../shared/contracts/machine.js';
import { recordRunEvents, type NewRunEvent } from '../services/run-events.js';
import { failRun, moveRun, release, requeue, type RunRow, type RunWrites, type WorkerRow } from './run-moves.js';

function failureOf(worker: WorkerRow): WorkerFailure {
  if (worker.exitCode !== null) return { kind: 'exited', code: worker.exitCode };
  if (worker.message === PROCESS_NOT_FOUND) return { kind: 'process-not-found' };
  if (worker.message === MACHINE_DOWN) return { kind: 'machine-down' };
  return { kind: 'no-exit-code', message: worker.message ?? 'failed' };
}

/** A failed worker the policy has not answered yet: the first by rank decides (a run restarts or fails once). */
async function applyFailure(w: RunWrites, run: RunRow, workers: WorkerRow[]): Promise<boolean> {
  const failed = workers.find((x) => x.state === 'failed' && x.restartAt === null && x.releasedAt === null);
  if (!failed) return false;
  const decision = decideFailure({
    policy: run.spec.failurePolicy,
    gang: run.spec.gang !== null,
    worker: { name: failed.name, rank: failed.rank, restarts: failed.restarts },
    runRestarts: run.restarts,
    failure: failureOf(failed),
  });
  if (decision.action === 'fail-run') await failRun(w, run, workers, decision.reason);
  else if (decision.action === 'restart-run')
    await requeue(w, run, workers, { reason: decision.reason, delayMs: decision.delayMs, restarts: decision.restart, restart: true });
  else {
    // It keeps its machine and reservation; the agent is told to start it again, as a new attempt, once the back-off
    // is over. Elsewhere, its machine is down and takes nothing new until it reports again, and its desired state
    // then no longer has the worker: the reservation goes now, and admission places the worker again (`replaceWorkers`).
    if (decision.elsewhere) await release(w, [failed]);
    await w.db
      .update(runWorkers)
      .set({
        restarts: decision.restart,
        restartAt: sql`now() + make_interval(secs => ${decision.delayMs / 1000})`,
        ...(decision.elsewhere ? { machineId: null } : {}),
      })
      .where(eq(runWorkers.id, failed.id));
    await w.db.update(runs).set({ reason: decision.reason }).where(eq(runs.id, run.id));
  }
  return decision.action !== 'restart-worker';
}

/** What the fleet says of the machines workers hold reservations on: their liveness, and whether replacement is paused. */
export interface FleetSight {
  machine(id: string): { name: string; liveness: MachineLiveness } | null;
  /** Why lost replicas of this workspace are not replaced now (`replacementPause`), or null. */
  paused(workspaceId: string): string | null;
}

/** Workers whose machine sight was lost of become `stale`, then `down`, then fail with `MACHINE_DOWN` (`sightMoves`). */
async function applySight(w: RunWrites, run: RunRow, workers: WorkerRow[], sight: FleetSight) {
  const events: NewRunEvent[] = [];
  for (const worker of workers) {
    if (worker.machineId === null || worker.releasedAt !== null) continue;
    const moves = sightMoves({
      worker: worker.name,
      state: worker.state as RunState,
      machine: sight.machine(worker.machineId),
      paused: sight.paused(run.workspaceId),
    });
    if (moves.length === 0) continue;
    const to = moves.at(-1)!.to;
    const failed = to === 'failed' ? { exitCode: null, message: MACHINE_DOWN, restartAt: null } : {};
    await w.db
      .update(runWorkers)
      .set({ state: to, ...failed })
      .where(eq(runWorkers.id, worker.id));
    Object.assign(worker, { state: to, ...failed });
    events.push(...moves.map((event) => ({ runId: run.id, workerId: worker.id, event })));
  }
  await recordRunEvents(w.db, events);
}

/** Workers whose restart back-off is over wait again as their next attempt, told to start at once. */
async function restartDue(w: RunWrites, run: RunRow, workers: WorkerRow[], now: Date) {
  const events: NewRunEvent[] = [];
  for (const worker of workers) {
    if (worker.state !== 'failed' || worker.restartAt === null || worker.restartAt > now) continue;
    const move = workerTransition(worker.name, 'failed', 'pending', `restart ${worker.restarts} of ${run.spec.failurePolicy.maxRestarts}`, 'controller');
    if (!('event' in move)) continue;
    events.push({ runId: run.id, workerId: worker.id, event: move.event });
    await w.db
      .update(runWorkers)
      .set({ state: 'pending', attempt: worker.attempt + 1, exitCode: null, message: null, restartAt: null, phase: 'start' })
      .where(eq(runWorkers.id, worker.id));
    Object.assign(worker, { state: 'pending', restartAt: null });
    if (worker.machineId) w.touched.add(worker.machineId);
  }
  await recordRunEvents(w.db, events);
}

/** The start barrier: workers ready to start are moved to `starting` (all together for a gang), or a gang that did not assemble is released. */
async function applyStart(w: RunWrites, run: RunRow, workers: WorkerRow[], now: Date): Promise<boolean> {
  const decision = startDecision({
    workers: workers.map((x) => ({ name: x.name, machineId: x.machineId, state: x.state as RunState })),
    gang: run.spec.gang,
    assemblingSince: (run.admittedAt ?? now).getTime(),
    now: now.getTime(),
  });
  if (decision.action === 'release') {
    await requeue(w, run, workers, { reason: decision.reason, delayMs: 0, restarts: run.restarts, restart: false });
    return true;
  }
  if (decision.action === 'wait') return false;
  const starting = workers.filter((x) => decision.workers.includes(x.name));
  const events: NewRunEvent[] = [];
  for (const worker of starting) {
    const move = workerTransition(worker.name, 'ready-to-start', 'starting', decision.reason, 'controller');
    if ('event' in move) events.push({ runId: run.id, workerId: worker.id, event: move.event });
    worker.state = 'starting';
  }
  await w.db
    .update(runWorkers)
    .set({ state: 'starting' })
    .where(
      inArray(
        runWorkers.id,
        starting.map((x) => x.id),
      ),
    );
  await recordRunEvents(w.db, events);
  // A gang's workers were told to prepare: now every one of them is told to start.
  const told = workers.filter((x) => x.phase === 'prepare' && x.machineId !== null);
  if (told.length > 0) {
    await w.db.update(runWorkers).set({ phase: 'start' }).where(eq(runWorkers.runId, run.id));
    for (const x of told) w.touched.add(x.machineId!);
  }
  return false;
}

/**
 * One pass over the admitted runs, each in turn: workers on machines sight was lost of move by their liveness
 * (`applySight`); a failed worker goes to the failure policy; a worker whose restart
 * is due waits again as its next attempt; the start barrier moves ready workers to `starting`; a worker that
 * completed gives back its reservation; and the run's state follows its workers (`deriveRunState`), completed when
 * every worker exited 0. `now` is the database's.
 */
export async function progressRuns(w: RunWrites, now: Date, sight: FleetSight): Promise<void> {
  const admitted = await w.db
    .select()
    .from(runs)
    .where(and(isNull(runs.finishedAt), notInArray(runs.state, ['pending'])))
    .orderBy(asc(runs.id))
    // Locked, as a cancel locks its run: a run cancelled meanwhile is not moved on by a pass that read it live.
    .for('update');
  for (const run of admitted) {
    const workers = await w.db.select().from(runWorkers).where(eq(runWorkers.runId, run.id)).orderBy(asc(runWorkers.rank));
    await applySight(w, run, workers, sight);
    if (await applyFailure(w, run, workers)) continue;
    await restartDue(w, run, workers, now);
    if (await applyStart(w, run, workers, now)) continue;
    await release(
      w,
      workers.filter((x) => x.state === 'completed'),
    );
    const derived = deriveRunState(workers.map((x) => ({ name: x.name, state: x.state as RunState })));
    if (derived.state === run.state) continue;
    const set =
      derived.state === 'completed' ? { finishedAt: sql`now()` } : derived.state === 'running' && run.startedAt === null ? { startedAt: sql`now()` } : {};
    await moveRun(w, run, derived.state, derived.reason, 'workers', set);
  }
}
