import { sweepOrphanedWorkloads } from '../services/workloads.js';
import { sweepInstances } from '../services/instances.js';
import { eq, inArray, sql } from 'drizzle-orm';
import { assignments, deployments, machines, replicaFailures } from '../store/schema/index.js';
import { newId } from '../../shared/ids.js';
import { queryRows, dbNow } from '../store/rows.js';
import { audit, withTransaction, type ServiceCtx, type ServicePorts } from '../services/service-context.js';
import { loadControllerState, saveControllerState } from '../services/controller-state.js';
import { sweepJtis } from '../services/machine-auth.js';
import { sweepRateWindows } from '../services/rate-limit.js';
import { nextResumedAt } from './liveness.js';
import { reconcile, type DesiredDeployment, type ReconcileAction } from './reconcile.js';
import { loadFleetSnapshot } from '../fleet/load.js';
import type { FleetSnapshot } from '../fleet/snapshot.js';
import type { TemplateFields } from '../fleet/template.js';
import { loadRuntimeRegistry } from '../registry/load.js';
import { EMPTY_REGISTRY, replicaHash, resolveRuntime, type RuntimeRegistry, type SecretEnvRefs } from '../registry/resolve.js';
import type { StoredAssignment } from '../registry/secret-env.js';
import { recordDeploymentEvents, type NewDeploymentEvent } from '../services/deployment-events.js';

/** Advisory lock key that makes one reconciler act at a time across instances. */
const RECONCILE_LOCK = 0x4c4e5852; // "LNXR"

type DeploymentRow = typeof deployments.$inferSelect;

/** A deployment's replica as the runtime registry resolves it now: what is signed, its secrets, its digest. */
export interface ReplicaTemplate {
  fields: TemplateFields;
  secretEnv: SecretEnvRefs;
  templateHash: string;
}

/** The replica template of a deployment, or null when its runtime does not resolve against the registry. */
export function replicaTemplate(deployment: DeploymentRow, registry: RuntimeRegistry): ReplicaTemplate | null {
  const resolved = resolveRuntime({ workspaceId: deployment.workspaceId, runtime: deployment.runtime, registry });
  if (!resolved.ok) return null;
  const fields = { model: deployment.model, runtime: resolved.value.runtime, artifact: deployment.artifact ?? null, resources: { gpus: deployment.gpus, memoryMiB: deployment.memoryMiB } };
  return { fields, secretEnv: resolved.value.secretEnv, templateHash: replicaHash(fields, resolved.value.secretEnv) };
}

/**
 * The assignment a deployment's replica runs, as stored and (with its secrets decrypted into the environment,
 * `revealSecretEnv`) signed into the machine's desired state. Only called for deployments that resolve.
 */
export function assignmentSpec(assignmentId: string, deployment: DeploymentRow, registry: RuntimeRegistry): StoredAssignment {
  const replica = replicaTemplate(deployment, registry);
  if (!replica) throw new Error(`deployment ${deployment.id}'s runtime does not resolve`);
  return {
    assignmentId,
    deploymentId: deployment.id,
    deploymentName: deployment.name,
    deploymentGeneration: deployment.generation,
    restartPolicy: deployment.restartPolicy,
    startup: deployment.startup,
    ...replica.fields,
    templateHash: replica.templateHash,
    ...(Object.keys(replica.secretEnv).length ? { secretEnv: replica.secretEnv } : {}),
  };
}

/**
 * The pure reconciler's view of one deployment. Null for a live deployment whose runtime no longer resolves
 * (the API refuses every change that would cause it, so only a store edited by hand gets there): the
 * controller then leaves its replicas as they are rather than guess. A deleted one is retired either way.
 */
export function desiredDeployment(d: DeploymentRow, registry: RuntimeRegistry): DesiredDeployment | null {
  const replica = replicaTemplate(d, registry);
  if (!replica && d.deletedAt === null) return null;
  return {
    id: d.id,
    model: d.model,
    generation: d.generation,
    templateHash: replica?.templateHash ?? '',
    replicas: d.replicas,
    selector: d.selector,
    gpus: d.gpus,
    memoryMiB: d.memoryMiB,
    rollout: d.rollout,
    deleted: d.deletedAt !== null,
  };
}

/** Reconciles the snapshot's workspaces one by one (placement never crosses a workspace). Pure. */
export function reconcileFleet(snapshot: FleetSnapshot, deploymentRows: readonly DeploymentRow[], registry: RuntimeRegistry): ReconcileAction[] {
  const actions: ReconcileAction[] = [];
  const desired = deploymentRows.map((d) => ({ row: d, desired: desiredDeployment(d, registry) }));
  // A deployment that does not resolve is left out with its replicas: nothing is placed, rolled or retired.
  const unresolved = new Set(desired.filter((d) => d.desired === null).map((d) => d.row.id));
  const templateOf = new Map(desired.flatMap((d) => (d.desired ? [[d.row.id, d.desired.templateHash] as const] : [])));
  const workspaceIds = [...new Set([...deploymentRows.map((d) => d.workspaceId), ...snapshot.machines.map((m) => m.workspaceId)])].sort();
  for (const workspaceId of workspaceIds) {
    const machines = snapshot.machines.filter((m) => m.workspaceId === workspaceId);
    actions.push(
      ...reconcile({
        deployments: desired.flatMap((d) => (d.row.workspaceId === workspaceId && d.desired ? [d.desired] : [])),
        machines: machines.map((m) => ({
          id: m.id,
          labels: m.labels,
          liveness: m.liveness,
          cordoned: m.cordoned,
          draining: m.draining,
          inventory: m.inventory,
          warmModels: m.warmModels,
          load: m.runtimes.reduce((sum, r) => sum + r.activeInvocations + r.queueDepth, 0),
          replicaFailures: new Map(m.replicaFailures.filter((f) => f.templateHash === templateOf.get(f.deploymentId)).map((f) => [f.deploymentId, f.reason])),
        })),
        assignments: machines.flatMap((m) =>
          m.runtimes
            .filter((r) => r.desired && !unresolved.has(r.deploymentId))
            .map((r) => ({
              id: r.assignmentId,
              machineId: m.id,
              deploymentId: r.deploymentId,
              deploymentGeneration: r.deploymentGeneration ?? 0,
              templateHash: r.templateHash ?? '',
              available: r.routable,
              failure: r.failure,
            })),
        ),
      }),
    );
  }
  return actions;
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

/** A reconcile pass, with the snapshot it read (null when it skipped a lock another pass held). */
async function reconcilePass(ctx: ControllerCtx, skipIfBusy: boolean): Promise<{ actions: ReconcileAction[]; snapshot: FleetSnapshot | null }> {
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
    const live = deploymentRows.filter((d) => d.deletedAt === null || snapshot!.machines.some((m) => m.runtimes.some((r) => r.desired && r.deploymentId === d.id)));
    // Template rows and secret versions (never values) resolve each deployment's runtime for its assignments.
    const registry = live.some((d) => d.runtime.kind === 'template') ? await loadRuntimeRegistry(tx.db) : EMPTY_REGISTRY;
    const all = reconcileFleet(snapshot!, live, registry);
    const deploymentById = new Map(live.map((d) => [d.id, d]));
    const machineById = new Map(snapshot!.machines.map((m) => [m.id, m]));
    const events: NewDeploymentEvent[] = [];
    for (const action of all) {
      if (action.type === 'pending') continue;
      const machine = machineById.get(action.machineId)!;
      const sinceGen = machine.desiredGen + 1;
      if (action.type === 'assign') {
        const id = newId('assignment');
        await tx.db.insert(assignments).values({ id, machineId: action.machineId, deploymentId: action.deploymentId, spec: assignmentSpec(id, deploymentById.get(action.deploymentId)!, registry), sinceGen });
        events.push({ workspaceId: machine.workspaceId, deploymentId: action.deploymentId, type: 'placed', machineId: action.machineId, assignmentId: id, message: `placed on ${machine.name}` });
      } else if (action.type === 'update') {
        // Same template: the running replica stays valid, so it stays routable (its sinceGen is kept).
        await tx.db
          .update(assignments)
          .set({ spec: assignmentSpec(action.assignmentId, deploymentById.get(action.deploymentId)!, registry) })
          .where(eq(assignments.id, action.assignmentId));
      } else if (action.type === 'fail') {
        // The mark is written with the retirement: no pass can see the replica gone and the machine unmarked.
        await tx.db.update(assignments).set({ removedAt: sql`now()` }).where(eq(assignments.id, action.assignmentId));
        // One failure per assignment (it is retired right here), so the assignment's id names it.
        await tx.db.insert(replicaFailures).values({ id: action.assignmentId, deploymentId: action.deploymentId, machineId: action.machineId, assignmentId: action.assignmentId, reason: action.reason });
        events.push({ workspaceId: machine.workspaceId, deploymentId: action.deploymentId, type: 'replica_failed', machineId: action.machineId, assignmentId: action.assignmentId, message: `replica failed on ${machine.name}: ${action.reason}` });
      } else {
        await tx.db.update(assignments).set({ removedAt: sql`now()` }).where(eq(assignments.id, action.assignmentId));
        events.push({ workspaceId: machine.workspaceId, deploymentId: action.deploymentId, type: 'retired', machineId: action.machineId, assignmentId: action.assignmentId, message: `${action.reason} (${machine.name})` });
      }
      touched.add(action.machineId);
      await audit(tx, { workspaceId: machine.workspaceId, action: `assignment.${action.type}`, target: action.machineId, details: { ...action } });
    }
    await recordDeploymentEvents(tx.db, events);
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
 * The controller tick: records the tick (detecting a control-plane interruption), reconciles, sweeps the
 * replay fence, the rate-limit windows past use and the workloads of dead instances, and refreshes the machine
 * gauges.
 */
export async function controllerTick({ ctx }: { ctx: ControllerCtx }): Promise<void> {
  const now = await dbNow(ctx.db);
  const previous = await loadControllerState(ctx.db);
  const resumedAt = nextResumedAt({ ...previous, now, config: ctx.config });
  await saveControllerState(ctx.db, { lastTickAt: now, resumedAt });
  const { snapshot } = await reconcilePass(ctx, true);
  await sweepJtis({ ctx });
  await sweepRateWindows(ctx.db);
  const orphans = await sweepOrphanedWorkloads({ ctx });
  if (orphans > 0) ctx.metrics.orphanedWorkloads.inc(orphans);
  await sweepInstances(ctx.db);
  const counts: Record<string, number> = { pending: 0, ready: 0, stale: 0, down: 0, revoked: 0 };
  for (const machine of (snapshot ?? (await loadFleetSnapshot(ctx.db, ctx.config))).machines) counts[machine.liveness]! += 1;
  for (const [state, n] of Object.entries(counts)) ctx.metrics.machines.set({ state }, n);
}
