import { and, eq, inArray, isNull, max, sql } from 'drizzle-orm';
import { deployments, workloads } from '../store/schema/index.js';
import type { ScaleToZero } from '../../shared/contracts/deployment.js';
import type { FleetSnapshot } from '../core/fleet/snapshot.js';
import { audit, type ServiceCtx } from '../services/service-context.js';
import { recordDeploymentEvents } from '../services/deployment-events.js';

type DeploymentRow = typeof deployments.$inferSelect;

/**
 * Whether a deployment that scales to zero goes to sleep now: awake, not serving (no runtime of it reports an
 * active or queued invocation), and idle for `idleSeconds` since its last activity, the latest of its newest
 * request, its waking and its last change. Pure: `now` is the database's clock.
 */
export function shouldSleep(input: {
  scaleToZero: ScaleToZero | null;
  asleepSince: Date | null;
  lastRequestAt: Date | null;
  wokenAt: Date | null;
  updatedAt: Date;
  busy: boolean;
  now: Date;
}): boolean {
  if (input.scaleToZero === null || input.asleepSince !== null || input.busy) return false;
  const lastActivity = Math.max(input.updatedAt.getTime(), input.lastRequestAt?.getTime() ?? 0, input.wokenAt?.getTime() ?? 0);
  return input.now.getTime() - lastActivity >= input.scaleToZero.idleSeconds * 1000;
}

/**
 * Puts to sleep, in the reconcile pass's transaction, the deployments of `rows` that `shouldSleep` says are idle:
 * `asleep_since = now()`, audited as `deployment.sleep`; the pass then retires their replicas. Returns their ids.
 * One query finds each candidate's newest request (index workloads(deployment_id, created_at)).
 */
export async function sleepIdleDeployments(tx: ServiceCtx, rows: readonly DeploymentRow[], snapshot: FleetSnapshot): Promise<Set<string>> {
  const awake = rows.filter((d) => d.deletedAt === null && d.scaleToZero !== null && d.asleepSince === null);
  if (awake.length === 0) return new Set();
  const newest = await tx.db
    .select({ deploymentId: workloads.deploymentId, at: max(workloads.createdAt) })
    .from(workloads)
    .where(
      inArray(
        workloads.deploymentId,
        awake.map((d) => d.id),
      ),
    )
    .groupBy(workloads.deploymentId);
  const lastRequest = new Map(newest.map((n) => [n.deploymentId, n.at]));
  const busy = new Set(snapshot.machines.flatMap((m) => m.runtimes.filter((r) => r.activeInvocations + r.queueDepth > 0).map((r) => r.deploymentId)));
  const asleep = new Set<string>();
  for (const d of awake) {
    if (!shouldSleep({ ...d, lastRequestAt: lastRequest.get(d.id) ?? null, busy: busy.has(d.id), now: snapshot.now })) continue;
    // Guarded on still being awake, so that it is put to sleep (and audited) once. A request arriving meanwhile
    // finds it asleep and wakes it.
    const [slept] = await tx.db
      .update(deployments)
      .set({ asleepSince: sql`now()` })
      .where(and(eq(deployments.id, d.id), isNull(deployments.asleepSince)))
      .returning({ id: deployments.id });
    if (!slept) continue;
    asleep.add(d.id);
    await audit(tx, {
      workspaceId: d.workspaceId,
      action: 'deployment.sleep',
      target: d.id,
      details: { name: d.name, idleSeconds: d.scaleToZero!.idleSeconds },
    });
    await recordDeploymentEvents(tx.db, [
      { workspaceId: d.workspaceId, deploymentId: d.id, type: 'asleep', message: `scaled to zero after ${d.scaleToZero!.idleSeconds} s without a request` },
    ]);
  }
  return asleep;
}
