import { sweepTelemetry } from '../services/telemetry.js';
import { sweepExpiredWorkloads, sweepOrphanedWorkloads } from '../services/workloads.js';
import { sweepInstances } from '../services/instances.js';
import { eq, inArray, sql } from 'drizzle-orm';
import { assignments, deployments, machines, replicaFailures } from '../store/schema/index.js';
import { newId } from '../../shared/ids.js';
import { queryRows, dbNow } from '../store/rows.js';
import { audit, withTransaction, type AfterWrite, type ServiceCtx, type ServicePorts } from '../services/service-context.js';
import { loadControllerState, saveControllerState } from '../services/controller-state.js';
import { sweepJtis } from '../services/machine-auth.js';
import { sweepRateWindows } from '../services/rate-limit.js';
import { summarizeAccessDenials } from '../services/access-denials.js';
import { nextResumedAt } from '../core/fleet/liveness.js';
import type { ReconcileAction } from '../core/fleet/reconcile.js';
import { reconcileFleet } from '../core/fleet/reconcile-fleet.js';
import { loadFleetSnapshot } from '../services/fleet-load.js';
import type { FleetSnapshot } from '../core/fleet/snapshot.js';
import type { RuntimeRegistry } from '../core/registry/resolve.js';
import type { StoredAssignment } from '../services/secret-env.js';
import { recordDeploymentEvents, type NewDeploymentEvent } from '../services/deployment-events.js';
import { replicaSets, type PlacementInputs, type ReplicaSet } from '../core/fleet/replica-sets.js';
import { replicaSetId, replicaSetOf } from '../core/fleet/tracks.js';
import { EMPTY_CATALOG } from '../core/fleet/versions.js';
import { loadPlacementInputs } from '../services/placement-load.js';
import { loadRunHolds } from '../services/run-queue.js';
import { pruneRunHolds } from '../services/run-holds.js';
import { recheckReservations } from './recheck.js';
import { reconcileRuns } from './runs.js';
import { sleepIdleDeployments } from './sleep.js';
import { autoscaleDeployments } from './autoscale.js';

/** Advisory lock key that makes one reconciler act at a time across instances. */
const RECONCILE_LOCK = 0x4c4e5852; // "LNXR"

type DeploymentRow = typeof deployments.$inferSelect;

/**
 * The assignment a replica of a set runs, as stored and (with its secrets decrypted into the environment,
 * `revealSecretEnv`, and its version's file URLs signed) signed into the machine's desired state. `set` defaults to
 * the deployment's stable set with no registry version. Only called for sets that resolve.
 */
export function assignmentSpec(
  assignmentId: string,
  deployment: DeploymentRow,
  registry: RuntimeRegistry,
  set?: Pick<ReplicaSet, 'track' | 'template'>,
): StoredAssignment {
  const { track, template } = set ?? replicaSets(deployment, { registry, versions: EMPTY_CATALOG, policies: new Map() })[0]!;
  if (!template) throw new Error(`deployment ${deployment.id}'s ${track} replicas do not resolve`);
  return {
    assignmentId,
    deploymentId: deployment.id,
    deploymentName: deployment.name,
    deploymentGeneration: deployment.generation,
    restartPolicy: deployment.restartPolicy,
    startup: deployment.startup,
    ...template.fields,
    track,
    templateHash: template.templateHash,
    ...(Object.keys(template.secretEnv).length ? { secretEnv: template.secretEnv } : {}),
  };
}

type ControllerCtx = ServiceCtx & Pick<ServicePorts, 'config' | 'bus' | 'metrics'>;

/**
 * One reconcile pass: reads the fleet read model and the deployments, asks the pure reconciler for actions,
 * applies them in one transaction under an advisory lock (fenced by each machine's generation), then tells the
 * streams. Returns the actions taken.
 *
 * By default it waits for the lock: an operator's write (a deployment applied, a machine drained) is reconciled
 * before the API answers. `skipIfBusy` (ticks, heartbeats) returns an empty list at once when another pass holds
 * it: that pass, or the next tick, reads the same state.
 */
export async function reconcileOnce({ ctx, skipIfBusy = false }: { ctx: ControllerCtx; skipIfBusy?: boolean }): Promise<ReconcileAction[]> {
  return (await reconcilePass(ctx, skipIfBusy)).actions;
}

/** How long a `soon` pass waits for more asks to fold in. */
const SOON_MS = 100;

/**
 * An instance's `afterWrite` port: a reconcile pass as the system, awaited, for the verb that wrote; or, `soon`,
 * one pass `SOON_MS` later for all that asked meanwhile, awaited by none (on Workers it may not outlive the request
 * that asked: the cron's tick then places, as it always did).
 */
export function reconcileAfterWrites(ctx: () => ControllerCtx): AfterWrite {
  let soonPending = false;
  return async (options) => {
    if (!options?.soon) {
      await reconcileOnce({ ctx: ctx(), skipIfBusy: options?.skipIfBusy });
      return;
    }
    if (soonPending) return;
    soonPending = true;
    setTimeout(() => {
      soonPending = false;
      // Awaited by nobody: a pass that fails leaves the placement to the next tick, which reports its own failures.
      reconcileOnce({ ctx: ctx(), skipIfBusy: true }).catch(() => {});
    }, SOON_MS);
  };
}

/** A reconcile pass, with the snapshot it read (null when it skipped a lock another pass held). */
async function reconcilePass(
  ctx: ControllerCtx,
  skipIfBusy: boolean,
  sleepIdle = false,
): Promise<{ actions: ReconcileAction[]; snapshot: FleetSnapshot | null }> {
  const timer = ctx.metrics.reconcileDuration.startTimer();
  const touched = new Set<string>();
  let snapshot: FleetSnapshot | null = null;
  const actions = await withTransaction(ctx, async (tx) => {
    if (skipIfBusy) {
      const [lock] = await queryRows<{ locked: boolean }>(tx.db, sql`select pg_try_advisory_xact_lock(${RECONCILE_LOCK}) as locked`);
      if (!lock?.locked) return [];
    } else {
      await queryRows(tx.db, sql`select pg_advisory_xact_lock(${RECONCILE_LOCK})`);
    }
    snapshot = await loadFleetSnapshot(tx.db, ctx.config);
    // Deleted deployments are read too while they still hold assignments, so their replicas are retired.
    const deploymentRows = await tx.db.select().from(deployments);
    const live = deploymentRows.filter(
      (d) => d.deletedAt === null || snapshot!.machines.some((m) => m.runtimes.some((r) => r.desired && r.deploymentId === d.id)),
    );
    if (sleepIdle) {
      const asleep = await sleepIdleDeployments(tx, live, snapshot);
      for (const d of live) if (asleep.has(d.id)) d.asleepSince = snapshot.now;
    }
    const inputs = await loadPlacementInputs(tx.db, live);
    // The runs' share of this pass comes after the replicas': what it will hold is read first (docs/runs.md, "Aging").
    const holds = await loadRunHolds(tx.db, ctx.config, snapshot.now, snapshot);
    const placement = { replacementPauseFraction: ctx.config.replacementPauseFraction, holds };
    if (sleepIdle) await autoscaleDeployments(tx, live, snapshot, (row) => roomFor(row, { snapshot: snapshot!, live, inputs, placement }));
    const all = reconcileFleet(snapshot!, live, inputs, placement);
    const deploymentById = new Map(live.map((d) => [d.id, d]));
    const setById = new Map(live.flatMap((d) => replicaSets(d, inputs).map((s) => [s.desired.id, s] as const)));
    const machineById = new Map(snapshot!.machines.map((m) => [m.id, m]));
    const placed = { machineIds: new Set<string>(), workspaceIds: new Set<string>() };
    const events: NewDeploymentEvent[] = [];
    for (const action of all) {
      if (action.type === 'pending') continue;
      const machine = machineById.get(action.machineId)!;
      const sinceGen = machine.desiredGen + 1;
      const { deploymentId, track } = replicaSetOf(action.deploymentId);
      const deployment = deploymentById.get(deploymentId)!;
      const spec = (assignmentId: string) => assignmentSpec(assignmentId, deployment, inputs.registry, setById.get(action.deploymentId)!);
      const on = track === 'stable' ? machine.name : `${machine.name}, canary`;
      if (action.type === 'assign') {
        const id = newId('assignment');
        await tx.db.insert(assignments).values({ id, machineId: action.machineId, deploymentId, track, spec: spec(id), sinceGen });
        placed.machineIds.add(action.machineId);
        placed.workspaceIds.add(deployment.workspaceId);
        events.push({
          workspaceId: machine.workspaceId,
          deploymentId,
          type: 'placed',
          machineId: action.machineId,
          assignmentId: id,
          message: `placed on ${on}`,
        });
      } else if (action.type === 'update') {
        // Same template: the running replica stays valid, so it stays routable (its sinceGen is kept).
        await tx.db
          .update(assignments)
          .set({ spec: spec(action.assignmentId) })
          .where(eq(assignments.id, action.assignmentId));
      } else if (action.type === 'fail') {
        // The mark is written with the retirement: no pass can see the replica gone and the machine unmarked.
        await tx.db.update(assignments).set({ removedAt: sql`now()` }).where(eq(assignments.id, action.assignmentId));
        // One failure per assignment (it is retired right here), so the assignment's id names it.
        await tx.db
          .insert(replicaFailures)
          .values({ id: action.assignmentId, deploymentId, machineId: action.machineId, assignmentId: action.assignmentId, reason: action.reason });
        events.push({
          workspaceId: machine.workspaceId,
          deploymentId,
          type: 'replica_failed',
          machineId: action.machineId,
          assignmentId: action.assignmentId,
          message: `replica failed on ${on}: ${action.reason}`,
        });
      } else {
        await tx.db.update(assignments).set({ removedAt: sql`now()` }).where(eq(assignments.id, action.assignmentId));
        // A canary set that is gone while its deployment lives was removed (or now names the stable version).
        const reason = track === 'canary' && action.reason === 'deployment deleted' && deployment.deletedAt === null ? 'canary removed' : action.reason;
        events.push({
          workspaceId: machine.workspaceId,
          deploymentId,
          type: 'retired',
          machineId: action.machineId,
          assignmentId: action.assignmentId,
          message: `${reason} (${on})`,
        });
      }
      touched.add(action.machineId);
      await audit(tx, {
        workspaceId: machine.workspaceId,
        action: `assignment.${action.type}`,
        target: action.machineId,
        details: { ...action, deploymentId, track },
      });
    }
    await recheckReservations(tx.db, { machineIds: [...placed.machineIds], workspaceIds: [...placed.workspaceIds] });
    await recordDeploymentEvents(tx.db, events);
    for (const machineId of await reconcileRuns(tx.db, ctx.config, snapshot!)) touched.add(machineId);
    if (touched.size > 0) {
      await tx.db
        .update(machines)
        .set({ desiredGen: sql`${machines.desiredGen} + 1` })
        .where(inArray(machines.id, [...touched]));
    }
    return all;
  });
  timer();
  for (const machineId of touched) await ctx.bus.publish(`machine:${machineId}`, { type: 'desired' });
  return { actions, snapshot };
}

/**
 * How many more replicas of `row`'s stable set this pass could place, the workspace's quota included: a dry run of
 * the reconciler with the set at its autoscaling maximum, less what that run could not place.
 */
function roomFor(
  row: DeploymentRow,
  pass: { snapshot: FleetSnapshot; live: readonly DeploymentRow[]; inputs: PlacementInputs; placement: Parameters<typeof reconcileFleet>[3] },
): number {
  const most = row.autoscale?.maxReplicas ?? row.replicas;
  const rows = pass.live.map((d) => (d.id === row.id ? { ...d, replicas: most } : d));
  const stable = replicaSetId(row.id, 'stable');
  const pending = reconcileFleet(pass.snapshot, rows, pass.inputs, pass.placement).find((a) => a.type === 'pending' && a.deploymentId === stable);
  return Math.max(0, most - (pending?.type === 'pending' ? pending.missing : 0) - row.replicas);
}

/** A tick's share of the workloads past their retention: a backlog (a lowered retention) drains over several ticks. */
const RETENTION_SWEEP = { batchSize: 1_000, maxBatches: 5 };

/**
 * The controller tick: records the tick (detecting a control-plane interruption), puts idle deployments that
 * scale to zero to sleep and reconciles (one pass), sweeps the
 * replay fence, records the count of the refused requests of each minute that ended (`access.denied`), sweeps the
 * rate-limit windows past use and the workloads of dead instances, deletes the workloads past their retention
 * (`workloadRetentionDays`, at most `RETENTION_SWEEP` rows a tick), the telemetry samples past theirs
 * (`telemetryRetentionHours`, as many) and the run holds older than the fair-share
 * window, and refreshes the machine gauges.
 */
export async function controllerTick({ ctx }: { ctx: ControllerCtx }): Promise<void> {
  const now = await dbNow(ctx.db);
  const previous = await loadControllerState(ctx.db);
  const resumedAt = nextResumedAt({ ...previous, now, config: ctx.config });
  await saveControllerState(ctx.db, { lastTickAt: now, resumedAt });
  const { snapshot } = await reconcilePass(ctx, true, true);
  await sweepJtis({ ctx });
  await summarizeAccessDenials({ ctx });
  await sweepRateWindows(ctx.db);
  const orphans = await sweepOrphanedWorkloads({ ctx });
  if (orphans > 0) ctx.metrics.orphanedWorkloads.inc(orphans);
  await sweepExpiredWorkloads({ ctx, input: { retentionDays: ctx.config.workloadRetentionDays, ...RETENTION_SWEEP } });
  await sweepTelemetry(ctx, ctx.config.telemetryRetentionHours, RETENTION_SWEEP.batchSize * RETENTION_SWEEP.maxBatches);
  await sweepInstances(ctx.db);
  await pruneRunHolds(ctx.db, now, ctx.config.runFairShareWindowMs);
  const counts: Record<string, number> = { pending: 0, ready: 0, stale: 0, down: 0, revoked: 0 };
  for (const machine of (snapshot ?? (await loadFleetSnapshot(ctx.db, ctx.config))).machines) counts[machine.liveness]! += 1;
  for (const [state, n] of Object.entries(counts)) ctx.metrics.machines.set({ state }, n);
}
