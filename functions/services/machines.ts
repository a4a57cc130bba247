import { and, eq, gt, inArray, isNull, max, sql } from 'drizzle-orm';
import { assignments, machineCredentials, machines, runtimeReports, streamLeases } from '../store/schema/index.js';
import { ApiError } from '../errors.js';
import { groupBy } from '../../shared/group-by.js';
import { isRoutable, machineLiveness, runtimeLiveness } from '../controller/liveness.js';
import type { MachineView, RuntimeView } from '../../shared/contracts/machine.js';
import type { RuntimeState } from '../../shared/contracts/heartbeat.js';
import { dbNow } from '../store/rows.js';
import { loadControllerState } from './controller-state.js';
import { audit, withTransaction, type ServiceCtx } from './service-context.js';

/** Machines of a workspace (or of all, for routing) as the control plane sees them now (liveness judged with the database's clock). */
export async function listMachines({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId?: string; machineId?: string } }): Promise<MachineView[]> {
  const now = await dbNow(ctx.db);
  const { resumedAt } = await loadControllerState(ctx.db);
  const rows = await ctx.db
    .select()
    .from(machines)
    .where(and(input.workspaceId ? eq(machines.workspaceId, input.workspaceId) : undefined, input.machineId ? eq(machines.id, input.machineId) : undefined))
    .orderBy(machines.name, machines.createdAt);
  if (rows.length === 0) return [];
  const ids = rows.map((m) => m.id);
  const [leases, reports, current, credentials] = await Promise.all([
    ctx.db.select().from(streamLeases).where(and(inArray(streamLeases.machineId, ids), gt(streamLeases.expiresAt, sql`now()`))),
    ctx.db.select().from(runtimeReports).where(inArray(runtimeReports.machineId, ids)),
    ctx.db.select().from(assignments).where(and(inArray(assignments.machineId, ids), isNull(assignments.removedAt))),
    ctx.db
      .select({ machineId: machineCredentials.machineId, expiresAt: max(machineCredentials.expiresAt) })
      .from(machineCredentials)
      .where(inArray(machineCredentials.machineId, ids))
      .groupBy(machineCredentials.machineId),
  ]);
  const attached = new Set(leases.map((l) => l.machineId));
  const reportsOf = groupBy(reports, (r) => r.machineId);
  const assignmentsOf = groupBy(current, (a) => a.machineId);
  const credentialExpiry = new Map(credentials.map((c) => [c.machineId, c.expiresAt]));
  const config = ctx.ports.config;

  return rows.map((m) => {
    const liveness = machineLiveness({ lastHeartbeatAt: m.lastHeartbeatAt, revokedAt: m.revokedAt, now, resumedAt, config });
    const reportByAssignment = new Map((reportsOf.get(m.id) ?? []).map((r) => [r.assignmentId, r]));
    const specs = new Map((assignmentsOf.get(m.id) ?? []).map((a) => [a.id, a.spec]));
    const assignmentIds = [...new Set([...specs.keys(), ...reportByAssignment.keys()])].sort();
    const runtimes: RuntimeView[] = assignmentIds.map((assignmentId) => {
      const report = reportByAssignment.get(assignmentId);
      const spec = specs.get(assignmentId);
      const state = report
        ? runtimeLiveness({ reportedState: report.state as RuntimeState, reportedAt: report.reportedAt, machine: liveness, now, resumedAt, config })
        : liveness === 'ready' ? 'preparing' : 'down';
      return {
        assignmentId,
        deploymentId: spec?.deploymentId ?? report!.deploymentId,
        deploymentName: spec?.deploymentName ?? '',
        model: spec?.model ?? '',
        reportedState: (report?.state as RuntimeState | undefined) ?? null,
        state,
        gen: report?.gen ?? null,
        restarts: report?.restarts ?? 0,
        message: report?.message ?? null,
        reportedAgeMs: report ? now.getTime() - report.reportedAt.getTime() : null,
        routable:
          spec !== undefined &&
          isRoutable({
            runtime: state,
            runtimeGen: report?.gen ?? null,
            machine: liveness,
            streamAttached: attached.has(m.id),
            cordoned: m.cordoned,
            draining: m.draining,
            desiredGen: m.desiredGen,
            desiredExpiresAt: m.desiredExpiresAt,
            now,
          }),
      };
    });
    return {
      id: m.id,
      name: m.name,
      workspaceId: m.workspaceId,
      labels: m.labels,
      state: liveness,
      streamAttached: attached.has(m.id),
      heartbeatAgeMs: m.lastHeartbeatAt ? Math.max(0, now.getTime() - m.lastHeartbeatAt.getTime()) : null,
      lastHeartbeatAt: m.lastHeartbeatAt?.toISOString() ?? null,
      desiredGen: m.desiredGen,
      reportedGen: m.reportedGen,
      cordoned: m.cordoned,
      draining: m.draining,
      revokedAt: m.revokedAt?.toISOString() ?? null,
      credentialExpiresAt: credentialExpiry.get(m.id)?.toISOString() ?? null,
      inventory: m.inventory,
      runtimes,
      createdAt: m.createdAt.toISOString(),
    };
  });
}

/** One machine of the workspace, or 404. */
export async function getMachine({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string; machineId: string } }): Promise<MachineView> {
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
export async function revokeMachine({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string; machineId: string; reason?: string } }): Promise<void> {
  await withTransaction(ctx, async (tx) => {
    const row = await lockMachine(tx, input.workspaceId, input.machineId);
    if (row.revokedAt) throw new ApiError('conflict', 'the machine is already revoked');
    await tx.db.update(machines).set({ revokedAt: sql`now()` }).where(eq(machines.id, input.machineId));
    await tx.db.delete(streamLeases).where(eq(streamLeases.machineId, input.machineId));
    await audit(tx, { workspaceId: input.workspaceId, action: 'machine.revoke', target: input.machineId, details: { reason: input.reason ?? null } });
  });
  await ctx.ports.bus.publish(`machine:${input.machineId}`, { type: 'revoked', reason: input.reason ?? 'revoked by an operator' });
}

/** Cordons (no new placements) or uncordons a machine. */
export async function setMachineCordon({
  ctx,
  input,
}: {
  ctx: ServiceCtx;
  input: { workspaceId: string; machineId: string; cordoned: boolean };
}): Promise<void> {
  await withTransaction(ctx, async (tx) => {
    const row = await lockMachine(tx, input.workspaceId, input.machineId);
    if (row.revokedAt) throw new ApiError('conflict', 'the machine is revoked');
    await tx.db.update(machines).set({ cordoned: input.cordoned }).where(eq(machines.id, input.machineId));
    await audit(tx, { workspaceId: input.workspaceId, action: input.cordoned ? 'machine.cordon' : 'machine.uncordon', target: input.machineId });
  });
}

/** Adds a new credential for a machine; the presenting one stays valid until its own expiry (overlap). */
export async function rotateMachineCredential({
  ctx,
  input,
}: {
  ctx: ServiceCtx;
  input: { machineId: string; workspaceId: string; publicKey: { kty: 'OKP'; crv: 'Ed25519'; x: string }; credentialId: string };
}): Promise<{ credentialId: string; credentialExpiresAt: Date }> {
  return await withTransaction(ctx, async (tx) => {
    const [row] = await tx.db
      .insert(machineCredentials)
      .values({
        id: input.credentialId,
        machineId: input.machineId,
        publicKey: input.publicKey,
        expiresAt: sql`now() + make_interval(secs => ${ctx.ports.config.credentialLifetimeMs / 1000})`,
      })
      .returning({ expiresAt: machineCredentials.expiresAt });
    await audit(tx, { workspaceId: input.workspaceId, action: 'machine.credential.rotate', target: input.machineId, details: { credentialId: input.credentialId } });
    return { credentialId: input.credentialId, credentialExpiresAt: row!.expiresAt };
  });
}

