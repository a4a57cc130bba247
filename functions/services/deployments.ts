import { and, eq, isNull, sql } from 'drizzle-orm';
import { deployments } from '../store/schema/index.js';
import { newId } from '../../shared/ids.js';
import { canonicalize } from '../../shared/canonical.js';
import { StartupSpec, type ArtifactPin, type RestartPolicy } from '../../shared/contracts/desired.js';
import {
  RolloutSpec,
  type CanarySpec,
  type ModelSource,
  type ScaleToZero,
  type DeploymentDetail,
  type DeploymentListItem,
  type DeploymentRuntime,
  type DeploymentSpec,
  type DeploymentStatus,
  type DeploymentView,
} from '../../shared/contracts/deployment.js';
import { ApiError } from '../kernel/errors.js';
import { AutoscalerMemory, type AutoscaleSpec } from '../../shared/contracts/autoscale.js';
import { loadFleetSnapshot } from './fleet-load.js';
import type { FleetSnapshot } from '../core/fleet/snapshot.js';
import { reconcileFleet } from '../core/fleet/reconcile-fleet.js';
import type { ReconcileAction } from '../core/fleet/reconcile.js';
import { replicaSets, type PlacementInputs } from '../core/fleet/replica-sets.js';
import { loadPlacementInputs } from './placement-load.js';
import { loadRunHolds } from './run-queue.js';
import { EMPTY_CATALOG, type VersionCatalog } from '../core/fleet/versions.js';
import type { Track } from '../core/fleet/tracks.js';
import { listDeploymentEvents } from './deployment-events.js';
import { requireResolvableRuntime } from './runtime-registry.js';
import type { RuntimeRegistry } from '../core/registry/resolve.js';
import { audit, reconcileAfterWrite, withTransaction, type ServiceCtx, type ServicePorts } from './service-context.js';
import { cutPage, type PageRequest, type RowPage } from '../core/paging.js';
import { checkDeploymentSource } from './deployment-source.js';
import { loadWorkspacePolicy } from './workspace-policy.js';

export interface DeploymentInput {
  workspaceId: string;
  name: string;
  model: string;
  /** A registered template with its params and env (checked against the registry here), or the simulator. */
  runtime: DeploymentRuntime;
  artifact: ArtifactPin | null;
  restartPolicy: RestartPolicy;
  replicas: number;
  selector: Record<string, string>;
  gpus: number;
  memoryMiB: number;
  /** Active adapter calls per replica; defaults to the column default, 16. */
  maxConcurrency?: number;
  /** Queued + running invocations of the deployment before 429; defaults to the column default, 256. */
  queueCapacity?: number;
  startup?: StartupSpec;
  rollout?: RolloutSpec;
  /** The registry alias or version it serves (null: none, its `artifact` if any). */
  source?: ModelSource | null;
  canary?: CanarySpec | null;
  gpuMemoryMiB?: number;
  replicasPerMachine?: number;
  dataClass?: string | null;
  scaleToZero?: ScaleToZero | null;
  autoscale?: AutoscaleSpec | null;
}

type DeploymentRow = typeof deployments.$inferSelect;

/** The spec a row holds, as a PUT would declare it: what a view shows and what scaling re-applies. */
function specOf(row: DeploymentRow): Omit<DeploymentInput, 'workspaceId' | 'name'> & DeploymentSpec {
  return {
    model: row.model,
    runtime: row.runtime,
    artifact: row.artifact ?? null,
    restartPolicy: row.restartPolicy,
    replicas: row.replicas,
    selector: row.selector,
    gpus: row.gpus,
    memoryMiB: row.memoryMiB,
    maxConcurrency: row.maxConcurrency,
    queueCapacity: row.queueCapacity,
    startup: row.startup,
    rollout: row.rollout,
    source: row.source ?? null,
    canary: row.canary ?? null,
    gpuMemoryMiB: row.gpuMemoryMiB,
    replicasPerMachine: row.replicasPerMachine,
    dataClass: row.dataClass,
    scaleToZero: row.scaleToZero ?? null,
    autoscale: row.autoscale ?? null,
  };
}

function deploymentView(row: DeploymentRow): DeploymentView {
  return {
    id: row.id,
    name: row.name,
    ...specOf(row),
    generation: row.generation,
    createdAt: row.createdAt.toISOString(),
    updatedAt: row.updatedAt.toISOString(),
  };
}

/** One live deployment of a workspace, by id. */
export async function getDeployment({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string; id: string } }): Promise<DeploymentView | undefined> {
  const [row] = await ctx.db
    .select()
    .from(deployments)
    .where(and(eq(deployments.workspaceId, input.workspaceId), eq(deployments.id, input.id), isNull(deployments.deletedAt)));
  return row && deploymentView(row);
}

/** One page of the live deployments of a workspace, by name then id (a key `[name, id]`). */
export async function listDeployments({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'config'>;
  input: { workspaceId: string } & PageRequest<readonly [name: string, id: string]>;
}): Promise<RowPage<DeploymentListItem>> {
  const rows = await ctx.db
    .select()
    .from(deployments)
    .where(
      and(
        eq(deployments.workspaceId, input.workspaceId),
        isNull(deployments.deletedAt),
        input.after ? sql`(${deployments.name}, ${deployments.id}) > (${input.after[0]}, ${input.after[1]})` : undefined,
      ),
    )
    .orderBy(deployments.name, deployments.id)
    .limit(input.limit + 1);
  const page = cutPage(rows, input.limit);
  const statuses = await loadStatuses(ctx, input.workspaceId, page.items);
  return {
    items: page.items.map((d, i) => {
      const { desired, ready, starting, failed, unplaceable, degraded, asleep } = statuses[i]!;
      return { ...deploymentView(d), status: { desired, ready, starting, failed, unplaceable, degraded, asleep } };
    }),
    more: page.more,
  };
}

/**
 * The statuses of `shown`, deployments of one workspace: one read of the fleet, of the workspace's live deployments
 * (placement weighs them all) and of the placement inputs, and one dry run of the reconciler, whatever their number.
 */
async function loadStatuses(
  ctx: ServiceCtx & Pick<ServicePorts, 'config'>,
  workspaceId: string,
  shown: readonly DeploymentRow[],
  live?: readonly DeploymentRow[],
): Promise<DeploymentStatus[]> {
  if (shown.length === 0) return [];
  const rows =
    live ??
    (await ctx.db
      .select()
      .from(deployments)
      .where(and(eq(deployments.workspaceId, workspaceId), isNull(deployments.deletedAt))));
  const snapshot = await loadFleetSnapshot(ctx.db, ctx.config, { workspaceId });
  const inputs = await loadPlacementInputs(ctx.db, rows, { workspaceId });
  return deploymentStatuses({
    deployments: shown,
    workspaceDeployments: rows,
    snapshot,
    ...inputs,
    replacementPauseFraction: ctx.config.replacementPauseFraction,
    holds: await loadRunHolds(ctx.db, ctx.config, snapshot.now),
  });
}

/**
 * Creates the deployment, or updates it (bumping its generation) when its spec differs; a no-op otherwise.
 * Capacity changes (concurrency, queue) apply at once through routing; spec changes roll the replicas.
 * A template runtime must resolve against the registry now (400 naming the param, `unknown_template`,
 * `unknown_secret`); it is stored as given, params and all, and resolved again by the controller.
 */
export async function applyDeployment({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'afterWrite'>;
  input: DeploymentInput;
}): Promise<{ id: string; generation: number; changed: boolean }> {
  const written = await withTransaction(ctx, async (tx) => {
    const [existing] = await tx.db
      .select()
      .from(deployments)
      .where(and(eq(deployments.workspaceId, input.workspaceId), eq(deployments.name, input.name), isNull(deployments.deletedAt)))
      .for('update');
    await requireResolvableRuntime(tx.db, { workspaceId: input.workspaceId, runtime: input.runtime });
    await checkDeploymentSource(tx, {
      workspaceId: input.workspaceId,
      name: input.name,
      source: input.source ?? null,
      canary: input.canary ?? null,
      dataClass: input.dataClass ?? null,
      runtime: input.runtime,
      policy: await loadWorkspacePolicy(tx.db, input.workspaceId),
    });
    const autoscale = input.autoscale ?? null;
    const spec = {
      model: input.model,
      runtime: input.runtime,
      artifact: input.artifact,
      restartPolicy: input.restartPolicy,
      replicas: autoscale ? autoscaledReplicas(autoscale, existing, input.replicas) : input.replicas,
      selector: input.selector,
      gpus: input.gpus,
      memoryMiB: input.memoryMiB,
      maxConcurrency: input.maxConcurrency ?? 16,
      queueCapacity: input.queueCapacity ?? 256,
      startup: input.startup ?? StartupSpec.parse({}),
      rollout: input.rollout ?? RolloutSpec.parse({}),
      source: input.source ?? null,
      canary: input.canary ?? null,
      gpuMemoryMiB: input.gpuMemoryMiB ?? 0,
      replicasPerMachine: input.replicasPerMachine ?? 1,
      dataClass: input.dataClass ?? null,
      scaleToZero: input.scaleToZero ?? null,
      autoscale,
    };
    if (!existing) {
      const id = newId('deployment');
      await tx.db.insert(deployments).values({ id, workspaceId: input.workspaceId, name: input.name, ...spec });
      await audit(tx, { workspaceId: input.workspaceId, action: 'deployment.create', target: id, details: { name: input.name, replicas: input.replicas } });
      return { id, generation: 1, changed: true };
    }
    // Canonically (RFC 8785): the stored JSON comes back with its keys in another order.
    const before = canonicalize(Object.fromEntries(Object.keys(spec).map((key) => [key, existing[key as keyof typeof spec]])));
    if (before === canonicalize(spec)) return { id: existing.id, generation: existing.generation, changed: false };
    const generation = existing.generation + 1;
    // A new policy's periods are measured afresh (functions/core/autoscale/decide.ts).
    const policyChanged = canonicalize(existing.autoscale ?? null) !== canonicalize(autoscale);
    await tx.db
      .update(deployments)
      .set({ ...spec, generation, updatedAt: sql`now()`, ...(policyChanged ? { autoscaleState: null } : {}) })
      .where(eq(deployments.id, existing.id));
    await audit(tx, { workspaceId: input.workspaceId, action: 'deployment.update', target: existing.id, details: { generation } });
    return { id: existing.id, generation, changed: true };
  });
  await reconcileAfterWrite(ctx);
  return written;
}

/**
 * The count an autoscaled deployment is written with: the autoscaler's current one while it stays in the policy's
 * bounds (applying the same spec again does not undo its work), else the spec's, clamped into them. Never 0: zero is
 * the sleep path's (`minReplicas: 0`), and a deployment starts awake.
 */
function autoscaledReplicas(policy: AutoscaleSpec, existing: DeploymentRow | undefined, asked: number): number {
  const low = Math.max(1, policy.minReplicas);
  const clamp = (n: number) => Math.min(policy.maxReplicas, Math.max(low, n));
  return existing?.autoscale && clamp(existing.replicas) === existing.replicas ? existing.replicas : clamp(asked);
}

/** Retires a deployment: its replicas drain and stop, and its model leaves `/v1/models`. */
export async function deleteDeployment({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'afterWrite'>;
  input: { workspaceId: string; name: string };
}): Promise<{ id: string }> {
  const written = await withTransaction(ctx, async (tx) => {
    const [row] = await tx.db
      .update(deployments)
      .set({ deletedAt: sql`now()`, updatedAt: sql`now()` })
      .where(and(eq(deployments.workspaceId, input.workspaceId), eq(deployments.name, input.name), isNull(deployments.deletedAt)))
      .returning({ id: deployments.id });
    if (!row) throw new ApiError('not_found', `deployment ${input.name} not found`);
    await audit(tx, { workspaceId: input.workspaceId, action: 'deployment.delete', target: row.id, details: { name: input.name } });
    return row;
  });
  await reconcileAfterWrite(ctx);
  return written;
}

/**
 * A deployment's status, derived from the fleet read model on every read: its replicas and their sets, how many of
 * the stable set are ready, starting or failed, the canary's counts, the rollout's progress, (from a dry run of the
 * pure reconciler over the same snapshot) the replicas the scheduler cannot place with its reason for every machine
 * it rejected or the reason that holds a whole set back, and whether it is degraded, and why. `versions` and
 * `policies` default to none (a deployment without a registry source, a workspace without a policy). Pure.
 */
export function deploymentStatus(input: StatusInputs & { deployment: DeploymentRow }): DeploymentStatus {
  return deploymentStatuses({ ...input, deployments: [input.deployment] })[0]!;
}

interface StatusInputs {
  workspaceDeployments: readonly DeploymentRow[];
  snapshot: FleetSnapshot;
  registry: RuntimeRegistry;
  versions?: VersionCatalog;
  policies?: PlacementInputs['policies'];
  replacementPauseFraction?: number;
  /** The machines held for aged runs (`loadRunHolds`); absent: none. */
  holds?: ReadonlyMap<string, string>;
}

/** `deploymentStatus` of each of `deployments` (of one workspace), from one dry run of the reconciler for them all. Pure. */
function deploymentStatuses(input: StatusInputs & { deployments: readonly DeploymentRow[] }): DeploymentStatus[] {
  const inputs: PlacementInputs = { registry: input.registry, versions: input.versions ?? EMPTY_CATALOG, policies: input.policies ?? new Map() };
  const actions = reconcileFleet(input.snapshot, input.workspaceDeployments, inputs, {
    replacementPauseFraction: input.replacementPauseFraction,
    holds: input.holds,
  });
  return input.deployments.map((deployment) => statusOf(deployment, input.snapshot, inputs, actions));
}

function statusOf(deployment: DeploymentRow, snapshot: FleetSnapshot, inputs: PlacementInputs, actions: readonly ReconcileAction[]): DeploymentStatus {
  const sets = replicaSets(deployment, inputs);
  const setOf = (track: Track) => sets.find((s) => s.track === track);
  const machineName = new Map(snapshot.machines.map((m) => [m.id, m.name]));
  const replicas = snapshot.machines.flatMap((m) =>
    m.runtimes
      .filter((r) => r.deploymentId === deployment.id)
      .map((r) => {
        const set = setOf(r.track);
        return {
          assignmentId: r.assignmentId,
          machineId: m.id,
          machineName: m.name,
          state: r.state,
          current: r.desired && set?.template != null && r.templateHash === set.desired.templateHash && !m.draining,
          track: r.track,
          desired: r.desired,
          routable: r.routable,
          restarts: r.restarts,
          message: r.message,
          progress: r.progress,
        };
      }),
  );
  const live = replicas.filter((r) => r.desired);
  const updated = live.filter((r) => r.current);
  const retiring = replicas.length - live.length;
  const outdated = live.length - updated.length;
  const isStarting = (r: (typeof live)[number]) => r.state === 'preparing' || r.state === 'pulling' || r.state === 'starting';
  const counts = (track: Track) => {
    const mine = live.filter((r) => r.track === track);
    const wanted = setOf(track)?.desired.replicas ?? 0;
    return {
      wanted,
      ready: mine.filter((r) => r.routable).length,
      starting: mine.filter(isStarting).length,
      complete: updated.filter((r) => r.track === track && r.routable).length === wanted && updated.filter((r) => r.track === track).length === wanted,
    };
  };
  const stable = counts('stable');
  const canary = counts('canary');
  const canarySet = setOf('canary');

  const maxRestarts = deployment.restartPolicy.maxRestarts;
  const failing = snapshot.machines.flatMap((m) =>
    m.runtimes
      .filter((r) => r.deploymentId === deployment.id && r.desired && r.state === 'failed' && r.templateHash === setOf(r.track)?.desired.templateHash)
      // Restarts left are not promised: a launch the node's policy refused is not restarted either.
      .map(
        (r) =>
          `${r.track === 'canary' ? 'canary ' : ''}replica failed on ${m.name}: ${r.failure ?? `${r.message ?? 'failed'} (${r.restarts} of ${maxRestarts} restarts used)`}`,
      ),
  );
  // Marks explain a shortfall; once enough replicas serve elsewhere they are the machine's business, not the deployment's.
  const short = stable.ready < stable.wanted || (canarySet !== undefined && canary.ready < canary.wanted);
  const marks = short
    ? snapshot.machines.flatMap((m) => m.replicaFailures.filter((f) => f.deploymentId === deployment.id).map((f) => `replica failed on ${m.name}: ${f.reason}`))
    : [];
  let unplaceable = 0;
  const unplaceableReasons: DeploymentStatus['unplaceableReasons'] = [];
  const stuck: string[] = [];
  for (const set of sets) {
    const pending = actions.find((a) => a.type === 'pending' && a.deploymentId === set.desired.id);
    if (pending?.type !== 'pending') continue;
    const prefix = set.track === 'canary' ? 'canary: ' : '';
    const rejected = pending.rejected.map((r) => ({
      machineId: r.machineId,
      machineName: machineName.get(r.machineId) ?? r.machineId,
      reason: `${prefix}${r.reason}`,
    }));
    unplaceable += pending.missing;
    unplaceableReasons.push(...rejected);
    const setShort = set.track === 'stable' ? stable.ready < stable.wanted : canary.ready < canary.wanted;
    const why =
      pending.reason ??
      (pending.rejected.map((r) => `${machineName.get(r.machineId) ?? r.machineId}: ${r.reason}`).join('; ') || 'no machine in this workspace');
    if (pending.missing > 0 && setShort) stuck.push(`${prefix}${pending.missing} ${pending.missing === 1 ? 'replica' : 'replicas'} cannot be placed: ${why}`);
    else if (pending.missing === 0 && set.desired.hold !== null) stuck.push(`${prefix}replicas kept as they are: ${set.desired.hold}`);
  }
  const degradedReasons = [...failing, ...marks, ...stuck];
  return {
    desired: stable.wanted,
    ready: stable.ready,
    starting: stable.starting,
    failed: live.filter((r) => r.track === 'stable' && r.state === 'failed').length,
    unplaceable,
    unplaceableReasons,
    degraded: degradedReasons.length > 0,
    degradedReasons,
    canary:
      canarySet && deployment.canary ? { version: deployment.canary.version, desired: canary.wanted, ready: canary.ready, starting: canary.starting } : null,
    asleep: deployment.asleepSince !== null,
    autoscaler: deployment.autoscale ? (AutoscalerMemory.safeParse(deployment.autoscaleState).data?.last ?? null) : null,
    rollout: {
      state: stable.complete && canary.complete && outdated === 0 && retiring === 0 ? 'complete' : 'progressing',
      updated: updated.length,
      outdated,
      retiring,
    },
    replicas,
  };
}

/**
 * Scales a deployment: applies its stored spec with another replica count (`applyDeployment`, so the change, its
 * generation and its audit entry are the same as a PUT with that count). `generation`, when given, is the one the
 * caller saw: a deployment changed since is a 409, not silently overwritten. Scaling touches only the surplus or
 * the missing replicas.
 */
export async function scaleDeployment({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'afterWrite'>;
  input: { workspaceId: string; name: string; replicas: number; generation?: number };
}): Promise<{ id: string; generation: number; changed: boolean }> {
  const written = await withTransaction(ctx, async (tx) => {
    const [row] = await tx.db
      .select()
      .from(deployments)
      .where(and(eq(deployments.workspaceId, input.workspaceId), eq(deployments.name, input.name), isNull(deployments.deletedAt)))
      .for('update');
    if (!row) throw new ApiError('not_found', `deployment ${input.name} not found`);
    if (row.autoscale) {
      const { minReplicas, maxReplicas } = row.autoscale;
      throw new ApiError('conflict', `deployment ${input.name} is autoscaled (${minReplicas} to ${maxReplicas} replicas): change its autoscale policy instead`);
    }
    if (input.generation !== undefined && row.generation !== input.generation) {
      throw new ApiError('conflict', `deployment ${input.name} changed since generation ${input.generation} (now ${row.generation}); look at it again`);
    }
    return await applyDeployment({ ctx: tx, input: { workspaceId: input.workspaceId, name: row.name, ...specOf(row), replicas: input.replicas } });
  });
  await reconcileAfterWrite(ctx);
  return written;
}

/** One live deployment by name, with its derived status and its recent events; 404 when there is none. */
export async function describeDeployment({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'config'>;
  input: { workspaceId: string; name: string };
}): Promise<DeploymentDetail> {
  const rows = await ctx.db
    .select()
    .from(deployments)
    .where(and(eq(deployments.workspaceId, input.workspaceId), isNull(deployments.deletedAt)));
  const deployment = rows.find((d) => d.name === input.name);
  if (!deployment) throw new ApiError('not_found', `deployment ${input.name} not found`);
  const [status] = await loadStatuses(ctx, input.workspaceId, [deployment], rows);
  const events = await listDeploymentEvents(ctx.db, [deployment.id]);
  return { ...deploymentView(deployment), status: status!, events: events.get(deployment.id) ?? [] };
}

/**
 * Every live deployment of a workspace (by name, at most `limit`) with its derived status and recent events, from
 * one read of the fleet: what the console lists.
 */
export async function describeDeployments({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'config'>;
  input: { workspaceId: string; limit: number; eventsPerDeployment: number };
}): Promise<{ items: DeploymentDetail[]; more: boolean }> {
  const rows = await ctx.db
    .select()
    .from(deployments)
    .where(and(eq(deployments.workspaceId, input.workspaceId), isNull(deployments.deletedAt)))
    .orderBy(deployments.name, deployments.id);
  if (rows.length === 0) return { items: [], more: false };
  const shown = rows.slice(0, input.limit);
  const statuses = await loadStatuses(ctx, input.workspaceId, shown, rows);
  const events = await listDeploymentEvents(
    ctx.db,
    shown.map((d) => d.id),
    input.eventsPerDeployment,
  );
  return {
    items: shown.map((deployment, i) => ({ ...deploymentView(deployment), status: statuses[i]!, events: events.get(deployment.id) ?? [] })),
    more: rows.length > shown.length,
  };
}

/**
 * The live deployments of a workspace named in `names`, each with its model and derived status, from one read of the
 * fleet whatever their number; a name with no live deployment is not in the map. What swarms derive theirs from.
 */
export async function deploymentStatusesByName({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'config'>;
  input: { workspaceId: string; names: readonly string[] };
}): Promise<Map<string, { model: string; status: DeploymentStatus }>> {
  if (input.names.length === 0) return new Map();
  const rows = await ctx.db
    .select()
    .from(deployments)
    .where(and(eq(deployments.workspaceId, input.workspaceId), isNull(deployments.deletedAt)));
  const wanted = new Set(input.names);
  const shown = rows.filter((d) => wanted.has(d.name));
  const statuses = await loadStatuses(ctx, input.workspaceId, shown, rows);
  return new Map(shown.map((d, i) => [d.name, { model: d.model, status: statuses[i]! }]));
}
