import { and, desc, eq, inArray, lt, sql } from 'drizzle-orm';
import { deploymentEvents } from '../store/schema/index.js';
import { newId } from '../../shared/ids.js';
import type { Db } from '../store/db.js';
import type { DeploymentEvent, DeploymentEventType } from '../../shared/contracts/deployment.js';

/** Events kept per deployment: enough to answer "what happened" over a rollout, bounded whatever its age. */
const EVENTS_KEPT = 200;

export interface NewDeploymentEvent {
  workspaceId: string;
  deploymentId: string;
  type: DeploymentEventType;
  machineId?: string | null;
  assignmentId?: string | null;
  message?: string | null;
}

/** Appends events (in the caller's transaction) and trims each touched deployment to its newest `EVENTS_KEPT`. */
export async function recordDeploymentEvents(db: Db, events: readonly NewDeploymentEvent[]): Promise<void> {
  if (events.length === 0) return;
  // Ids are ULIDs minted in order, so the id orders events within a deployment.
  await db.insert(deploymentEvents).values(
    events.map((e) => ({
      id: newId('event'),
      workspaceId: e.workspaceId,
      deploymentId: e.deploymentId,
      type: e.type,
      machineId: e.machineId ?? null,
      assignmentId: e.assignmentId ?? null,
      message: e.message ?? null,
    })),
  );
  for (const deploymentId of new Set(events.map((e) => e.deploymentId))) {
    await db
      .delete(deploymentEvents)
      .where(
        and(
          eq(deploymentEvents.deploymentId, deploymentId),
          lt(
            deploymentEvents.id,
            sql`(select ${deploymentEvents.id} from ${deploymentEvents} where ${deploymentEvents.deploymentId} = ${deploymentId} order by ${deploymentEvents.id} desc offset ${EVENTS_KEPT - 1} limit 1)`,
          ),
        ),
      );
  }
}

/** The newest events of deployments, oldest first within each. */
export async function listDeploymentEvents(db: Db, deploymentIds: readonly string[], limit = 50): Promise<Map<string, DeploymentEvent[]>> {
  const out = new Map<string, DeploymentEvent[]>();
  if (deploymentIds.length === 0) return out;
  const rows = await db
    .select()
    .from(deploymentEvents)
    .where(inArray(deploymentEvents.deploymentId, [...deploymentIds]))
    .orderBy(desc(deploymentEvents.id))
    .limit(limit * deploymentIds.length);
  for (const row of rows.reverse()) {
    const list = out.get(row.deploymentId) ?? [];
    list.push({
      type: row.type as DeploymentEventType,
      machineId: row.machineId,
      assignmentId: row.assignmentId,
      message: row.message,
      at: row.at.toISOString(),
    });
    out.set(row.deploymentId, list.slice(-limit));
  }
  return out;
}
