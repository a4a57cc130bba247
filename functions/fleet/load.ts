import { and, eq, gt, isNull, max, sql } from 'drizzle-orm';
import { assignments, machineCredentials, machines, runtimeReports, streamLeases } from '../store/schema/index.js';
import type { Db } from '../store/db.js';
import type { ControlPlaneConfig } from '../config.js';
import { dbNow } from '../store/rows.js';
import { loadControllerState } from '../services/controller-state.js';
import { buildFleetSnapshot, type FleetRows, type FleetSnapshot } from './snapshot.js';

/**
 * The one loader of the fleet read model: machines (of a workspace, or all), their leases, credentials,
 * desired assignments and runtime reports, judged with the database's `now()`. The reads run one after another:
 * inside a transaction they share one connection, which does not queue concurrent queries.
 */
export async function loadFleetSnapshot(db: Db, config: ControlPlaneConfig, scope: { workspaceId?: string; machineId?: string } = {}): Promise<FleetSnapshot> {
  const now = await dbNow(db);
  const { resumedAt } = await loadControllerState(db);
  const machineRows = await db
    .select()
    .from(machines)
    .where(and(scope.workspaceId ? eq(machines.workspaceId, scope.workspaceId) : undefined, scope.machineId ? eq(machines.id, scope.machineId) : undefined))
    .orderBy(machines.name, machines.createdAt);
  const inScope = (column: typeof streamLeases.machineId | typeof assignments.machineId | typeof runtimeReports.machineId | typeof machineCredentials.machineId) =>
    scope.machineId
      ? eq(column, scope.machineId)
      : scope.workspaceId
        ? sql`${column} in (select ${machines.id} from ${machines} where ${machines.workspaceId} = ${scope.workspaceId})`
        : undefined;
  const leases = await db.select({ machineId: streamLeases.machineId }).from(streamLeases).where(and(inScope(streamLeases.machineId), gt(streamLeases.expiresAt, sql`now()`)));
  const credentials = await db
    .select({ machineId: machineCredentials.machineId, expiresAt: max(machineCredentials.expiresAt) })
    .from(machineCredentials)
    .where(inScope(machineCredentials.machineId))
    .groupBy(machineCredentials.machineId);
  const assignmentRows = await db
    .select({ id: assignments.id, machineId: assignments.machineId, deploymentId: assignments.deploymentId, spec: assignments.spec, sinceGen: assignments.sinceGen })
    .from(assignments)
    .where(and(inScope(assignments.machineId), isNull(assignments.removedAt)));
  const reports = await db.select().from(runtimeReports).where(inScope(runtimeReports.machineId));
  const rows: FleetRows = {
    now,
    resumedAt,
    machines: machineRows,
    attached: new Set(leases.map((l) => l.machineId)),
    credentialExpiry: new Map(credentials.flatMap((c) => (c.expiresAt ? [[c.machineId, c.expiresAt] as const] : []))),
    assignments: assignmentRows,
    reports,
  };
  return buildFleetSnapshot(rows, config);
}
