import { and, asc, count, desc, eq, gt, inArray, isNull, lt, notInArray, sql } from 'drizzle-orm';
import { machines, runEvents, runs, runWorkers } from '../store/schema/index.js';
import type { RunSpec } from '../../shared/contracts/run.js';
import type { RunDetail, RunView, RunWorkerView } from '../../shared/contracts/run-view.js';
import { newId } from '../../shared/ids.js';
import { ApiError } from '../kernel/errors.js';
import { cutPage, type PageRequest, type RowPage } from '../core/paging.js';
import { runDemand } from '../core/runs/demand.js';
import { workerName } from '../core/runs/env.js';
import { runTransition, workerTransition, type RunState } from '../core/runs/states.js';
import { requireResolvableRuntime } from './runtime-registry.js';
import { audit, reconcileAfterWrite, withTransaction, type ServiceCtx, type ServicePorts } from './service-context.js';
import { bumpDesiredGen, recordRunEvents, type NewRunEvent } from './run-events.js';
import { releaseWorkers } from './run-holds.js';

type RunRow = typeof runs.$inferSelect;
type WorkerRow = typeof runWorkers.$inferSelect;

const FINAL = ['completed', 'failed'];

function runView(row: RunRow, workerCount: number, workersDone: number): RunView {
  return {
    id: row.id,
    name: row.name,
    state: row.state as RunState,
    priority: row.priority,
    reason: row.reason,
    position: row.position,
    restarts: row.restarts,
    workerCount,
    workersDone,
    submittedAt: row.submittedAt.toISOString(),
    startedAt: row.startedAt?.toISOString() ?? null,
    finishedAt: row.finishedAt?.toISOString() ?? null,
  };
}

function workerView(row: WorkerRow, machineName: string | null): RunWorkerView {
  return {
    id: row.id,
    name: row.name,
    rank: row.rank,
    group: row.group,
    state: row.state as RunState,
    machineId: row.machineId,
    machineName: row.machineId ? machineName : null,
    attempt: row.attempt,
    restarts: row.restarts,
    phase: row.phase,
    exitCode: row.exitCode,
    message: row.message,
    resources: row.resources,
  };
}

/** The template a run names as a deployment's runtime would name it: its workers' command resolves from it. */
export function runRuntime(spec: RunSpec) {
  return { kind: 'template' as const, template: spec.template, params: spec.params, env: {} };
}

/**
 * Queues a run: its spec is valid (the contract's `RunSpec`), its template resolves with its params now (400
 * `unknown_template` or naming the param), and no live run of its workspace has its name (409). Its workers are
 * made with it, unplaced; the controller's pass that follows places it or says why it waits. Audited.
 */
export async function submitRun({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'afterWrite'>;
  /** `jobId`: the job whose runner the run is (the `agent` backend, docs/jobs.md). */
  input: { workspaceId: string; name: string; spec: RunSpec; jobId?: string };
}): Promise<{ id: string }> {
  const written = await withTransaction(ctx, async (tx) => {
    await requireResolvableRuntime(tx.db, { workspaceId: input.workspaceId, runtime: runRuntime(input.spec) });
    const [taken] = await tx.db
      .select({ id: runs.id })
      .from(runs)
      .where(and(eq(runs.workspaceId, input.workspaceId), eq(runs.name, input.name), isNull(runs.finishedAt)));
    if (taken) throw new ApiError('conflict', `run ${input.name} is still live (${taken.id}): cancel it or pick another name`);
    const id = newId('run');
    await tx.db.insert(runs).values({
      id,
      workspaceId: input.workspaceId,
      name: input.name,
      spec: input.spec,
      priority: input.spec.priority,
      reason: 'queued',
      jobId: input.jobId ?? null,
    });
    let rank = 0;
    const workers = runDemand(input.spec).flatMap((group) =>
      Array.from({ length: group.workers }, () => {
        const r = rank++;
        return {
          id: newId('worker'),
          runId: id,
          rank: r,
          group: group.name,
          name: workerName(input.name, group.name, r),
          resources: { gpus: group.need.gpus, cores: group.need.cores, memoryMiB: group.need.memoryMiB },
        };
      }),
    );
    // Inserted in slices: a run may have 4,096 workers, and a statement's parameters are bounded.
    for (let i = 0; i < workers.length; i += 500) await tx.db.insert(runWorkers).values(workers.slice(i, i + 500));
    await audit(tx, { workspaceId: input.workspaceId, action: 'run.submit', target: id, details: { name: input.name, spec: input.spec } });
    return { id };
  });
  await reconcileAfterWrite(ctx);
  return written;
}

/**
 * A workspace's runs, a page at a time in submission order (ids are time-ordered), or newest first (the console's
 * order: what an operator looks for is what was just submitted), each with its state and, while it waits, its
 * reason and position.
 */
export async function listRuns({
  ctx,
  input,
}: {
  ctx: ServiceCtx;
  input: { workspaceId: string; newestFirst?: boolean } & PageRequest<string>;
}): Promise<RowPage<RunView>> {
  const past = input.newestFirst ? lt : gt;
  const rows = await ctx.db
    .select()
    .from(runs)
    .where(and(eq(runs.workspaceId, input.workspaceId), input.after ? past(runs.id, input.after) : undefined))
    .orderBy(input.newestFirst ? desc(runs.id) : asc(runs.id))
    .limit(input.limit + 1);
  const page = cutPage(rows, input.limit);
  const ids = page.items.map((r) => r.id);
  const counts = ids.length
    ? await ctx.db
        .select({ runId: runWorkers.runId, n: count(), done: sql<number>`count(*) filter (where ${runWorkers.state} = 'completed')`.mapWith(Number) })
        .from(runWorkers)
        .where(inArray(runWorkers.runId, ids))
        .groupBy(runWorkers.runId)
    : [];
  const countOf = new Map(counts.map((c) => [c.runId, c]));
  return { items: page.items.map((r) => runView(r, countOf.get(r.id)?.n ?? 0, countOf.get(r.id)?.done ?? 0)), more: page.more };
}

const completed = (workers: readonly WorkerRow[]) => workers.filter((w) => w.state === 'completed').length;

async function loadRun(ctx: ServiceCtx, workspaceId: string, id: string): Promise<RunRow> {
  const [row] = await ctx.db
    .select()
    .from(runs)
    .where(and(eq(runs.workspaceId, workspaceId), eq(runs.id, id)));
  if (!row) throw new ApiError('not_found', `run ${id} not found`);
  return row;
}

/** One run with its spec, its workers in rank order and its events, oldest first. */
export async function showRun({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string; id: string } }): Promise<RunDetail> {
  const row = await loadRun(ctx, input.workspaceId, input.id);
  const rows = await ctx.db
    .select({ worker: runWorkers, machineName: machines.name })
    .from(runWorkers)
    .leftJoin(machines, eq(machines.id, runWorkers.machineId))
    .where(eq(runWorkers.runId, row.id))
    .orderBy(asc(runWorkers.rank));
  const workers = rows.map((r) => r.worker);
  const events = await ctx.db.select().from(runEvents).where(eq(runEvents.runId, row.id)).orderBy(asc(runEvents.seq));
  return {
    ...runView(row, workers.length, completed(workers)),
    spec: row.spec,
    workers: rows.map((r) => workerView(r.worker, r.machineName)),
    events: events.map((e) => ({ workerId: e.workerId, from: e.from, to: e.to, reason: e.reason, origin: e.origin, at: e.at.toISOString() })),
  };
}

/**
 * Cancels a live run: it fails (`cancelled`), its workers not yet ended fail with it, and every reservation is
 * released; their machines' desired state drops them, so their agents stop them. An ended run is 409. Audited.
 */
export async function cancelRun({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'afterWrite' | 'bus'>;
  input: { workspaceId: string; id: string };
}): Promise<RunView> {
  const written = await withTransaction(ctx, async (tx) => {
    const [row] = await tx.db
      .select()
      .from(runs)
      .where(and(eq(runs.workspaceId, input.workspaceId), eq(runs.id, input.id)))
      .for('update');
    if (!row) throw new ApiError('not_found', `run ${input.id} not found`);
    const move = runTransition(row.id, row.state as RunState, 'failed', 'cancelled', 'controller');
    if ('refused' in move) throw new ApiError('invalid_transition', move.refused);
    const workers = await tx.db.select().from(runWorkers).where(eq(runWorkers.runId, row.id));
    const events: NewRunEvent[] = [{ runId: row.id, workerId: null, event: move.event }];
    for (const worker of workers) {
      const failed = workerTransition(worker.name, worker.state as RunState, 'failed', 'cancelled', 'controller');
      if ('event' in failed) events.push({ runId: row.id, workerId: worker.id, event: failed.event });
    }
    await tx.db
      .update(runWorkers)
      .set({ state: 'failed', message: 'cancelled', restartAt: null })
      .where(and(eq(runWorkers.runId, row.id), notInArray(runWorkers.state, FINAL)));
    const released = await releaseWorkers(tx.db, eq(runWorkers.runId, row.id));
    const [ended] = await tx.db
      .update(runs)
      .set({ state: 'failed', reason: 'cancelled', position: null, finishedAt: sql`now()` })
      .where(eq(runs.id, row.id))
      .returning();
    await recordRunEvents(tx.db, events);
    const touched = await bumpDesiredGen(tx.db, released);
    await audit(tx, { workspaceId: input.workspaceId, action: 'run.cancel', target: row.id, details: { name: row.name, from: row.state } });
    // The workers as read before the cancel: those that completed stay completed, the others failed with it.
    return { view: runView(ended!, workers.length, completed(workers)), touched };
  });
  for (const machineId of written.touched) await ctx.bus.publish(`machine:${machineId}`, { type: 'desired' });
  await reconcileAfterWrite(ctx);
  return written.view;
}
