import { and, eq, inArray, isNotNull, notInArray, sql } from 'drizzle-orm';
import { assignments, machines, runtimeReports, type SampledRuntime, telemetrySamples } from '../store/schema/index.js';
import type { Db } from '../store/db.js';
import { ApiError } from '../kernel/errors.js';
import type { Heartbeat, RuntimeReport } from '../../shared/contracts/heartbeat.js';
import type { MachinePrincipal } from '../core/principals.js';
import { reconcileAfterWrite, withTransaction, type ServiceCtx, type ServicePorts } from './service-context.js';
import { recordDeploymentEvents, type NewDeploymentEvent } from './deployment-events.js';
import { applyWorkerReports } from './run-reports.js';
import type { DeploymentEventType } from '../../shared/contracts/deployment.js';

const EVENT_OF_STATE: Partial<Record<RuntimeReport['state'], DeploymentEventType>> = { starting: 'started', ready: 'ready', failed: 'failed' };

/**
 * The deployment events a report implies: a runtime that entered `starting`, `ready` or `failed`, and a
 * retired or draining one the node no longer reports (it stopped: `drained`). Pure.
 */
export function runtimeEvents(input: {
  machine: MachinePrincipal;
  before: ReadonlyArray<{ assignmentId: string; deploymentId: string; state: string }>;
  runtimes: readonly RuntimeReport[];
  /** Assignments among `before` that left desired state. */
  retired: ReadonlySet<string>;
}): NewDeploymentEvent[] {
  const previous = new Map(input.before.map((r) => [r.assignmentId, r.state]));
  const reported = new Set(input.runtimes.map((r) => r.assignmentId));
  const event = (type: DeploymentEventType, r: { assignmentId: string; deploymentId: string }, message: string | null): NewDeploymentEvent => ({
    workspaceId: input.machine.workspaceId,
    deploymentId: r.deploymentId,
    type,
    machineId: input.machine.machineId,
    assignmentId: r.assignmentId,
    message,
  });
  const events: NewDeploymentEvent[] = [];
  for (const r of input.runtimes) {
    const type = EVENT_OF_STATE[r.state];
    if (type && previous.get(r.assignmentId) !== r.state) events.push(event(type, r, r.state === 'failed' ? r.message : null));
  }
  // Only a retired (or draining) runtime counts as drained: an agent that restarts may briefly report nothing.
  for (const r of input.before) {
    if (!reported.has(r.assignmentId) && (input.retired.has(r.assignmentId) || r.state === 'draining' || r.state === 'stopped'))
      events.push(event('drained', r, 'stopped on its node'));
  }
  return events;
}

/**
 * The machine's `telemetry_at`, moved to now when its last kept sample is `intervalMs` old (docs/telemetry.md): set
 * in the heartbeat's own update of the machine's row, locked by it, so that concurrent heartbeats of one machine keep
 * one sample and a heartbeat costs no extra round trip when none is due.
 */
const telemetryAtAfter = (intervalMs: number) =>
  sql`case when ${machines.telemetryAt} is null or ${machines.telemetryAt} < now() - make_interval(secs => ${intervalMs / 1000}) then now() else ${machines.telemetryAt} end`;

/** Keeps the heartbeat's telemetry as a sample of the machine's history, at `at`. */
async function keepTelemetrySample(db: Db, machine: MachinePrincipal, heartbeat: Heartbeat, at: Date): Promise<void> {
  const runtimes: SampledRuntime[] = heartbeat.runtimes.map((r) => ({
    assignmentId: r.assignmentId,
    deploymentId: r.deploymentId,
    state: r.state,
    activeInvocations: r.activeInvocations,
    queueDepth: r.queueDepth,
    engine: r.engine,
  }));
  await db.insert(telemetrySamples).values({ machineId: machine.machineId, workspaceId: machine.workspaceId, at, gpus: heartbeat.gpus, runtimes });
}

/**
 * Records a heartbeat (docs/design.md section 4). The sequence must increase within a boot, so a replayed report
 * changes nothing; a runtime may be reported only under an assignment of this very machine. Its run workers' reports
 * move those workers (`applyWorkerReports`: reports of workers not this machine's are ignored and counted in
 * `ignoredWorkers`); its address is kept for the runs whose rank 0 it runs.
 */
export async function recordHeartbeat({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'afterWrite' | 'config'>;
  input: { machine: MachinePrincipal; heartbeat: Heartbeat };
}): Promise<{ desiredGen: number; runtimesChanged: boolean; ignoredWorkers: number }> {
  const { machine, heartbeat } = input;
  if (heartbeat.machineId !== machine.machineId) throw new ApiError('forbidden_machine', 'a machine may report only for itself');
  const written = await withTransaction(ctx, async (tx) => {
    const [current] = await tx.db
      .select({
        bootId: machines.bootId,
        lastSeq: machines.lastSeq,
        desiredGen: machines.desiredGen,
        lastHeartbeatAt: machines.lastHeartbeatAt,
      })
      .from(machines)
      .where(eq(machines.id, machine.machineId))
      .for('update');
    if (!current) throw new ApiError('not_found', 'machine not found');
    if (current.bootId === heartbeat.bootId && current.lastSeq !== null && heartbeat.seq <= current.lastSeq) {
      throw new ApiError('replayed_sequence', `sequence ${heartbeat.seq} is not after ${current.lastSeq} for this boot`);
    }

    const assignmentIds = [...new Set(heartbeat.runtimes.map((r) => r.assignmentId))];
    if (assignmentIds.length !== heartbeat.runtimes.length) throw new ApiError('validation_failed', 'each assignment may be reported once');
    if (assignmentIds.length > 0) {
      const owned = await tx.db
        .select({ id: assignments.id, deploymentId: assignments.deploymentId })
        .from(assignments)
        .where(and(inArray(assignments.id, assignmentIds), eq(assignments.machineId, machine.machineId)));
      const ownedById = new Map(owned.map((a) => [a.id, a.deploymentId]));
      for (const runtime of heartbeat.runtimes) {
        if (ownedById.get(runtime.assignmentId) !== runtime.deploymentId) {
          throw new ApiError('forbidden_machine', `assignment ${runtime.assignmentId} is not this machine's`);
        }
      }
    }

    const [sampled] = await tx.db
      .update(machines)
      .set({
        lastHeartbeatAt: sql`now()`,
        bootId: heartbeat.bootId,
        lastSeq: heartbeat.seq,
        reportedStatus: heartbeat.status,
        reportedGen: heartbeat.gen,
        warmModels: heartbeat.warmModels,
        cachedVersions: heartbeat.cachedVersions,
        metrics: heartbeat.metrics,
        gpus: heartbeat.gpus,
        telemetryAt: telemetryAtAfter(ctx.config.telemetrySampleMs),
        address: heartbeat.address,
      })
      .where(eq(machines.id, machine.machineId))
      // `now()` is the transaction's start: equal only when this very update moved it.
      .returning({ telemetryAt: machines.telemetryAt, sampled: sql<boolean>`${machines.telemetryAt} = now()` });
    if (sampled?.sampled && sampled.telemetryAt) await keepTelemetrySample(tx.db, machine, heartbeat, sampled.telemetryAt);
    const before = await tx.db
      .select({
        assignmentId: runtimeReports.assignmentId,
        deploymentId: runtimeReports.deploymentId,
        state: runtimeReports.state,
        gen: runtimeReports.gen,
        warm: runtimeReports.warm,
        restarts: runtimeReports.restarts,
      })
      .from(runtimeReports)
      .where(eq(runtimeReports.machineId, machine.machineId));
    const previous = new Map(before.map((r) => [r.assignmentId, r]));
    // What routing and the reconciler depend on: which runtimes the node has, their state, generation and warmth,
    // and their restarts (a failed runtime that used its last one is replaced at once).
    const runtimesChanged =
      before.length !== heartbeat.runtimes.length ||
      heartbeat.runtimes.some((r) => {
        const last = previous.get(r.assignmentId);
        return last?.state !== r.state || last.gen !== r.gen || last.warm !== r.warm || last.restarts !== r.restarts;
      });
    const vanished = before.filter((r) => !assignmentIds.includes(r.assignmentId)).map((r) => r.assignmentId);
    const retired = vanished.length
      ? await tx.db
          .select({ id: assignments.id })
          .from(assignments)
          .where(and(inArray(assignments.id, vanished), isNotNull(assignments.removedAt)))
      : [];
    await recordDeploymentEvents(tx.db, runtimeEvents({ machine, before, runtimes: heartbeat.runtimes, retired: new Set(retired.map((r) => r.id)) }));
    for (const runtime of heartbeat.runtimes) {
      const values = {
        deploymentId: runtime.deploymentId,
        state: runtime.state,
        gen: runtime.gen,
        activeInvocations: runtime.activeInvocations,
        queueDepth: runtime.queueDepth,
        warm: runtime.warm,
        progress: runtime.progress,
        restarts: runtime.restarts,
        message: runtime.message,
        engine: runtime.engine,
        reportedAt: sql`now()`,
      };
      await tx.db
        .insert(runtimeReports)
        .values({ machineId: machine.machineId, assignmentId: runtime.assignmentId, ...values })
        .onConflictDoUpdate({ target: [runtimeReports.machineId, runtimeReports.assignmentId], set: values });
    }
    // A runtime the agent no longer reports is gone from the node.
    await tx.db
      .delete(runtimeReports)
      .where(
        assignmentIds.length > 0
          ? and(eq(runtimeReports.machineId, machine.machineId), notInArray(runtimeReports.assignmentId, assignmentIds))
          : eq(runtimeReports.machineId, machine.machineId),
      );
    const workers = await applyWorkerReports(tx.db, machine.machineId, heartbeat.workers);
    return {
      desiredGen: current.desiredGen,
      runtimesChanged: runtimesChanged || workers.changed,
      ignoredWorkers: workers.ignored,
      firstReport: current.lastHeartbeatAt === null,
    };
  });
  // A runtime became ready, or stopped being, or left the node: a rollout or drain waiting for it moves on now rather
  // than at the next tick. A pass already running (another heartbeat's) reads this one's change, or the next does.
  if (written.runtimesChanged) await reconcileAfterWrite(ctx, { skipIfBusy: true });
  // A machine's first report since it enrolled: what it can run is placed shortly, not up to a tick later (four nodes
  // started together waited 2.4 s for their first replica), in one pass for all the first reports meanwhile, which
  // the report does not wait for (a thousand machines that enrolled together report together). Not a machine back
  // from stale: the tick places for those, which after an interruption are every machine at once.
  else if (written.firstReport) await reconcileAfterWrite(ctx, { soon: true });
  return { desiredGen: written.desiredGen, runtimesChanged: written.runtimesChanged, ignoredWorkers: written.ignoredWorkers };
}
