import { and, eq, gt, inArray, isNotNull, isNull, max, sql } from 'drizzle-orm';
import { assignments, deployments, machineCredentials, machines, replicaFailures, runtimeReports, runWorkers, streamLeases } from '../store/schema/index.js';
import type { Db } from '../store/db.js';
import type { ControlPlaneConfig } from '../kernel/config.js';
import { dbNow } from '../store/rows.js';
import { loadControllerState } from './controller-state.js';
import { instanceAlive } from './instances.js';
import { buildFleetSnapshot, type FleetRows, type FleetSnapshot } from '../core/fleet/snapshot.js';

/**
 * The one loader of the fleet read model: machines (of a workspace, or all), their leases, credentials,
 * desired assignments and runtime reports, judged with the database's `now()`. The reads run one after another:
 * inside a transaction they share one connection, which does not queue concurrent queries. With `limit`, one
 * page: at most `limit` machines with an id after `after`, in id order, and the rows of those machines only.
 */
export async function loadFleetSnapshot(
  db: Db,
  config: ControlPlaneConfig,
  scope: { workspaceId?: string; machineId?: string; after?: string; limit?: number } = {},
): Promise<FleetSnapshot> {
  const now = await dbNow(db);
  const controller = await loadControllerState(db);
  const machineQuery = db
    .select()
    .from(machines)
    .where(
      and(
        scope.workspaceId ? eq(machines.workspaceId, scope.workspaceId) : undefined,
        scope.machineId ? eq(machines.id, scope.machineId) : undefined,
        scope.after !== undefined ? gt(machines.id, scope.after) : undefined,
      ),
    )
    // Pages go by id (time-ordered): a machine enrolled while a client pages sorts after its cursor.
    .orderBy(...(scope.limit !== undefined ? [machines.id] : [machines.name, machines.createdAt]))
    .$dynamic();
  const machineRows = await (scope.limit !== undefined ? machineQuery.limit(scope.limit) : machineQuery);
  const inScope = (
    column:
      | typeof streamLeases.machineId
      | typeof assignments.machineId
      | typeof runtimeReports.machineId
      | typeof machineCredentials.machineId
      | typeof replicaFailures.machineId
      | typeof runWorkers.machineId,
  ) =>
    scope.machineId
      ? eq(column, scope.machineId)
      : scope.limit !== undefined
        ? inArray(
            column,
            machineRows.map((m) => m.id),
          )
        : scope.workspaceId
          ? sql`${column} in (select ${machines.id} from ${machines} where ${machines.workspaceId} = ${scope.workspaceId})`
          : undefined;
  // A link counts while its lease is unexpired, the instance holding it is alive, and the agent answers its pings.
  const pingTimeout = config.streamPingTimeoutMs / 1000;
  const leases = await db
    .select({ machineId: streamLeases.machineId })
    .from(streamLeases)
    .where(
      and(
        inScope(streamLeases.machineId),
        gt(streamLeases.expiresAt, sql`now()`),
        instanceAlive(streamLeases.instanceId),
        sql`coalesce(${streamLeases.answeredAt}, ${streamLeases.attachedAt}) > now() - make_interval(secs => ${pingTimeout})`,
      ),
    );
  const credentials = await db
    .select({ machineId: machineCredentials.machineId, expiresAt: max(machineCredentials.expiresAt) })
    .from(machineCredentials)
    .where(inScope(machineCredentials.machineId))
    .groupBy(machineCredentials.machineId);
  const assignmentRows = await db
    .select({
      id: assignments.id,
      machineId: assignments.machineId,
      deploymentId: assignments.deploymentId,
      spec: assignments.spec,
      sinceGen: assignments.sinceGen,
    })
    .from(assignments)
    .where(and(inScope(assignments.machineId), isNull(assignments.removedAt)));
  const workerRows = await db
    .select({ machineId: runWorkers.machineId, resources: runWorkers.resources })
    .from(runWorkers)
    .where(and(inScope(runWorkers.machineId), isNull(runWorkers.releasedAt), isNotNull(runWorkers.machineId)));
  const reports = await db.select().from(runtimeReports).where(inScope(runtimeReports.machineId));
  // A deleted deployment is never placed again: its marks keep nothing off a machine.
  const failures = await db
    .select({
      machineId: replicaFailures.machineId,
      deploymentId: replicaFailures.deploymentId,
      deploymentName: deployments.name,
      assignmentId: replicaFailures.assignmentId,
      reason: replicaFailures.reason,
      failedAt: replicaFailures.failedAt,
      templateHash: sql<string | null>`${assignments.spec}->>'templateHash'`,
    })
    .from(replicaFailures)
    .innerJoin(deployments, eq(deployments.id, replicaFailures.deploymentId))
    .leftJoin(assignments, eq(assignments.id, replicaFailures.assignmentId))
    .where(and(inScope(replicaFailures.machineId), isNull(replicaFailures.clearedAt), isNull(deployments.deletedAt)));
  const rows: FleetRows = {
    now,
    controller,
    machines: machineRows,
    attached: new Set(leases.map((l) => l.machineId)),
    credentialExpiry: new Map(credentials.flatMap((c) => (c.expiresAt ? [[c.machineId, c.expiresAt] as const] : []))),
    assignments: assignmentRows,
    reports,
    workers: workerRows.map((w) => ({ machineId: w.machineId!, ...w.resources })),
    replicaFailures: failures,
  };
  return buildFleetSnapshot(rows, config);
}
