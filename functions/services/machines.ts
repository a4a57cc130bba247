import { and, eq, inArray, isNull, sql } from 'drizzle-orm';
import { machineCredentials, machines, replicaFailures, streamLeases } from '../store/schema/index.js';
import { ApiError } from '../kernel/errors.js';
import type { MachineView } from '../../shared/contracts/machine.js';
import { loadFleetSnapshot } from './fleet-load.js';
import { machineResources, type FleetMachine } from '../core/fleet/snapshot.js';
import { cutPage, type PageRequest, type RowPage } from '../core/paging.js';
import { audit, reconcileAfterWrite, withTransaction, type ServiceCtx, type ServicePorts } from './service-context.js';

/** The API's view of a machine of the fleet read model. */
function machineView(m: FleetMachine): MachineView {
  return {
    id: m.id,
    name: m.name,
    workspaceId: m.workspaceId,
    labels: m.labels,
    state: m.liveness,
    reportedStatus: m.reportedStatus,
    streamAttached: m.streamAttached,
    heartbeatAgeMs: m.heartbeatAgeMs,
    lastHeartbeatAt: m.lastHeartbeatAt?.toISOString() ?? null,
    desiredGen: m.desiredGen,
    reportedGen: m.reportedGen,
    cordoned: m.cordoned,
    draining: m.draining,
    drained: m.drained,
    shared: m.shared,
    revokedAt: m.revokedAt?.toISOString() ?? null,
    credentialExpiresAt: m.credentialExpiresAt?.toISOString() ?? null,
    inventory: m.inventory,
    resources: machineResources(m),
    warmModels: m.warmModels,
    gpus: m.gpus,
    runtimes: m.runtimes.map((r) => ({
      assignmentId: r.assignmentId,
      deploymentId: r.deploymentId,
      deploymentName: r.deploymentName,
      model: r.model,
      desired: r.desired,
      reportedState: r.reportedState,
      state: r.state,
      gen: r.gen,
      restarts: r.restarts,
      message: r.message,
      reportedAgeMs: r.reportedAgeMs,
      routable: r.routable,
      warm: r.warm,
      activeInvocations: r.activeInvocations,
      queueDepth: r.queueDepth,
      engine: r.engine,
      progress: r.progress,
    })),
    attention: m.replicaFailures.map((f) => ({
      deploymentId: f.deploymentId,
      deploymentName: f.deploymentName,
      assignmentId: f.assignmentId,
      reason: f.reason,
      failedAt: f.failedAt.toISOString(),
    })),
    createdAt: m.createdAt.toISOString(),
  };
}

/**
 * Every machine of a workspace as the control plane sees them now (the fleet read model), by name: for callers
 * inside the control plane that need them all. The API pages with `listMachinePage`.
 */
export async function listMachines({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'config'>;
  input: { workspaceId: string; machineId?: string };
}): Promise<MachineView[]> {
  const snapshot = await loadFleetSnapshot(ctx.db, ctx.config, input);
  return snapshot.machines.map(machineView);
}

/** One page of a workspace's machines in id (enrollment) order, read from the rows of those machines only. */
export async function listMachinePage({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'config'>;
  input: { workspaceId: string } & PageRequest<string>;
}): Promise<RowPage<MachineView>> {
  const snapshot = await loadFleetSnapshot(ctx.db, ctx.config, { workspaceId: input.workspaceId, after: input.after, limit: input.limit + 1 });
  const page = cutPage(snapshot.machines, input.limit);
  return { items: page.items.map(machineView), more: page.more };
}

/** One machine of the workspace, or 404. */
export async function getMachine({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'config'>;
  input: { workspaceId: string; machineId: string };
}): Promise<MachineView> {
  const [view] = await listMachines({ ctx, input });
  if (!view) throw new ApiError('not_found', `machine ${input.machineId} not found`);
  return view;
}

async function lockMachine(ctx: ServiceCtx, workspaceId: string, machineId: string) {
  const [row] = await ctx.db
    .select()
    .from(machines)
    .where(and(eq(machines.id, machineId), eq(machines.workspaceId, workspaceId)))
    .for('update');
  if (!row) throw new ApiError('not_found', `machine ${machineId} not found`);
  return row;
}

/**
 * Revokes a machine: its credentials stop verifying at once, its stream lease is dropped and the instance
 * holding its stream is told to close it.
 */
export async function revokeMachine({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'bus' | 'afterWrite'>;
  input: { workspaceId: string; machineId: string; reason?: string };
}): Promise<void> {
  await withTransaction(ctx, async (tx) => {
    const row = await lockMachine(tx, input.workspaceId, input.machineId);
    if (row.revokedAt) throw new ApiError('conflict', 'the machine is already revoked');
    await tx.db.update(machines).set({ revokedAt: sql`now()` }).where(eq(machines.id, input.machineId));
    await tx.db.delete(streamLeases).where(eq(streamLeases.machineId, input.machineId));
    await audit(tx, { workspaceId: input.workspaceId, action: 'machine.revoke', target: input.machineId, details: { reason: input.reason ?? null } });
  });
  await ctx.bus.publish(`machine:${input.machineId}`, { type: 'revoked', reason: input.reason ?? 'revoked by an operator' });
  await reconcileAfterWrite(ctx);
}

/**
 * Sets a machine's scheduling state. `cordon`: no new placements, running replicas keep serving. `drain`: cordon,
 * and every replica moves elsewhere (its replacement starts and becomes ready before it is retired).
 * `uncordon`: placements allowed again (ends a drain too).
 */
export async function setMachineScheduling({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'afterWrite'>;
  input: { workspaceId: string; machineId: string; verb: 'cordon' | 'uncordon' | 'drain' };
}): Promise<void> {
  await withTransaction(ctx, async (tx) => {
    const row = await lockMachine(tx, input.workspaceId, input.machineId);
    if (row.revokedAt) throw new ApiError('conflict', 'the machine is revoked');
    const set =
      input.verb === 'uncordon' ? { cordoned: false, draining: false } : input.verb === 'drain' ? { cordoned: true, draining: true } : { cordoned: true };
    await tx.db.update(machines).set(set).where(eq(machines.id, input.machineId));
    await audit(tx, { workspaceId: input.workspaceId, action: `machine.${input.verb}`, target: input.machineId });
  });
  await reconcileAfterWrite(ctx);
}

/**
 * Lends a machine to the fleet's run queue (`share`: runs of every workspace may place workers on it) or takes it
 * back (`unshare`: other workspaces' workers already there run on until they end, none is placed anew). Audited.
 */
export async function setMachineSharing({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'afterWrite'>;
  input: { workspaceId: string; machineId: string; verb: 'share' | 'unshare' };
}): Promise<void> {
  await withTransaction(ctx, async (tx) => {
    const row = await lockMachine(tx, input.workspaceId, input.machineId);
    if (row.revokedAt) throw new ApiError('conflict', 'the machine is revoked');
    await tx.db
      .update(machines)
      .set({ shared: input.verb === 'share' })
      .where(eq(machines.id, input.machineId));
    await audit(tx, { workspaceId: input.workspaceId, action: `machine.${input.verb}`, target: input.machineId });
  });
  // Runs waiting for room may be placed on it at once, not at the next tick.
  await reconcileAfterWrite(ctx);
}

/**
 * Clears a machine's open replica failures, once an operator has looked at it: the deployments they kept off it
 * may be placed there again. The rows stay, with when they were cleared.
 */
export async function clearReplicaFailures({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'afterWrite'>;
  input: { workspaceId: string; machineId: string };
}): Promise<void> {
  await withTransaction(ctx, async (tx) => {
    await lockMachine(tx, input.workspaceId, input.machineId);
    const cleared = await tx.db
      .update(replicaFailures)
      .set({ clearedAt: sql`now()` })
      .where(and(eq(replicaFailures.machineId, input.machineId), isNull(replicaFailures.clearedAt)))
      .returning({ deploymentId: replicaFailures.deploymentId, assignmentId: replicaFailures.assignmentId });
    await audit(tx, { workspaceId: input.workspaceId, action: 'machine.clear-failures', target: input.machineId, details: { cleared } });
  });
  // A deployment short of replicas because of these marks is placed at once, not at the next tick.
  await reconcileAfterWrite(ctx);
}

/** Adds a new credential for a machine; the presenting one stays valid until its own expiry (overlap). */
export async function rotateMachineCredential({
  ctx,
  input,
}: {
  ctx: ServiceCtx & Pick<ServicePorts, 'config'>;
  input: { machineId: string; workspaceId: string; publicKey: { kty: 'OKP'; crv: 'Ed25519'; x: string }; credentialId: string };
}): Promise<{ credentialId: string; credentialExpiresAt: Date }> {
  return await withTransaction(ctx, async (tx) => {
    const [row] = await tx.db
      .insert(machineCredentials)
      .values({
        id: input.credentialId,
        machineId: input.machineId,
        publicKey: input.publicKey,
        expiresAt: sql`now() + make_interval(secs => ${ctx.config.credentialLifetimeMs / 1000})`,
      })
      .returning({ expiresAt: machineCredentials.expiresAt });
    await audit(tx, {
      workspaceId: input.workspaceId,
      action: 'machine.credential.rotate',
      target: input.machineId,
      details: { credentialId: input.credentialId },
    });
    return { credentialId: input.credentialId, credentialExpiresAt: row!.expiresAt };
  });
}

/** Which of `machineIds` are still enrolled (not revoked): the node-metric series worth keeping. */
export async function enrolledMachineIds({ ctx, input }: { ctx: ServiceCtx; input: { machineIds: string[] } }): Promise<Set<string>> {
  if (input.machineIds.length === 0) return new Set();
  const rows = await ctx.db
    .select({ id: machines.id })
    .from(machines)
    .where(and(inArray(machines.id, input.machineIds), isNull(machines.revokedAt)));
  return new Set(rows.map((row) => row.id));
}

/** Machine names by id, of every machine row of the workspace (revoked ones too): what a page shows for a machine id. */
export async function machineNames({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string } }): Promise<Map<string, string>> {
  const rows = await ctx.db.select({ id: machines.id, name: machines.name }).from(machines).where(eq(machines.workspaceId, input.workspaceId));
  return new Map(rows.map((m) => [m.id, m.name]));
}
