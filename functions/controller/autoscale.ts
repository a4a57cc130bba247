import { and, eq, gt, inArray, sql } from 'drizzle-orm';
import { deployments, workloads } from '../store/schema/index.js';
import { AutoscalerMemory, type AutoscalerDecision } from '../../shared/contracts/autoscale.js';
import { decide } from '../core/autoscale/decide.js';
import { deploymentSample, type RequestCounts } from '../core/autoscale/sample.js';
import type { FleetSnapshot } from '../core/fleet/snapshot.js';
import { audit, type ServiceCtx } from '../services/service-context.js';
import { recordDeploymentEvents, type NewDeploymentEvent } from '../services/deployment-events.js';

type DeploymentRow = typeof deployments.$inferSelect;

/** How far back the first sample of a deployment (or one after a long pause) looks for its requests. */
const FIRST_WINDOW_MS = 30_000;

/**
 * The autoscaler's share of a controller tick (docs/autoscaling.md), in the reconcile pass's transaction and
 * before it places anything: for each awake autoscaled deployment of `rows`, one load sample (the fleet snapshot
 * and its workload records since its previous sample), one `decide`, and the outcome written: the new count (no new
 * generation: the spec did not change), a `scaled` event and an audit entry for each move, the state for the next
 * pass and the decision in `autoscale_state`. A move to zero puts it to sleep as scale to zero does (its count kept
 * at `max(1, minReplicas)` for the wake). `roomFor` says how many more replicas of a deployment the fleet and its
 * workspace's quota can place now; it is asked only when a step up is due. The rows are updated in place, so that
 * the pass places what was decided.
 */
export async function autoscaleDeployments(
  tx: ServiceCtx,
  rows: DeploymentRow[],
  snapshot: FleetSnapshot,
  roomFor: (row: DeploymentRow) => number,
): Promise<void> {
  const now = snapshot.now.getTime();
  const awake = rows.filter((row) => row.autoscale && row.deletedAt === null && row.asleepSince === null);
  if (awake.length === 0) return;
  const open = await openRequests(
    tx,
    awake.map((row) => row.id),
  );
  const events: NewDeploymentEvent[] = [];
  for (const row of awake) {
    const policy = row.autoscale!;
    const memory = AutoscalerMemory.safeParse(row.autoscaleState).data ?? null;
    const since = Math.max(memory?.state.seenUntil ?? 0, now - FIRST_WINDOW_MS);
    const recent = await recentRequests(tx, row.id, new Date(since));
    const sample = deploymentSample(snapshot, row.id, { ...recent, open: open.get(row.id) ?? 0 });
    const input = { policy, current: row.replicas, samples: [sample], state: memory?.state ?? null, now };
    let outcome = decide({ ...input, room: Number.POSITIVE_INFINITY });
    // Pure: deciding again with the room known gives the same answer, bounded by it.
    if (outcome.decision.action === 'up') outcome = decide({ ...input, room: roomFor(row) });
    const last: AutoscalerDecision = { at: snapshot.now.toISOString(), ...outcome.decision };
    const { from, to, reason } = last;
    const asleep = to === 0;
    const replicas = asleep ? Math.max(1, policy.minReplicas) : to;
    await tx.db
      .update(deployments)
      .set({ replicas, autoscaleState: { state: outcome.state, last }, ...(asleep ? { asleepSince: snapshot.now } : {}) })
      .where(eq(deployments.id, row.id));
    row.replicas = replicas;
    row.autoscaleState = { state: outcome.state, last };
    if (last.action === 'hold') continue;
    if (asleep) row.asleepSince = snapshot.now;
    events.push({
      workspaceId: row.workspaceId,
      deploymentId: row.id,
      type: asleep ? 'asleep' : 'scaled',
      message: asleep ? `scaled to zero: ${reason}` : `scaled from ${from} to ${to}: ${reason}`,
    });
    await audit(tx, {
      workspaceId: row.workspaceId,
      action: asleep ? 'deployment.sleep' : 'deployment.autoscale',
      target: row.id,
      details: { name: row.name, from, to, reason, observed: last.observed },
    });
  }
  await recordDeploymentEvents(tx.db, events);
}

/**
 * How far before a sample's interval a request may have started and still count in its TTFT: a request is measured
 * when it finishes, and one that streamed for longer than this is left out of the percentile.
 */
const TTFT_LOOKBACK_MS = 30_000;

/** A deployment's requests started since `from`, and the TTFT p95 of those that finished since, on (deployment, created). */
async function recentRequests(tx: ServiceCtx, deploymentId: string, from: Date): Promise<Omit<RequestCounts, 'open'>> {
  const since = sql`${from.toISOString()}::timestamptz`;
  const [recent] = await tx.db
    .select({
      requests: sql<number>`count(*) filter (where ${workloads.createdAt} > ${since})::int`,
      ttftP95Ms: sql<number | null>`percentile_cont(0.95) within group (order by ${workloads.firstByteMs}) filter (where ${workloads.finishedAt} > ${since})`,
    })
    .from(workloads)
    .where(and(eq(workloads.deploymentId, deploymentId), gt(workloads.createdAt, new Date(from.getTime() - TTFT_LOOKBACK_MS))));
  return { requests: Number(recent?.requests ?? 0), ttftP95Ms: recent?.ttftP95Ms == null ? null : Number(recent.ttftP95Ms) };
}

/** The requests still open on any instance, per deployment of `ids`: one read on the state index for them all. */
async function openRequests(tx: ServiceCtx, ids: string[]): Promise<Map<string, number>> {
  const rows = await tx.db
    .select({ deploymentId: workloads.deploymentId, n: sql<number>`count(*)::int` })
    .from(workloads)
    .where(and(inArray(workloads.state, ['accepted', 'running']), inArray(workloads.deploymentId, ids)))
    .groupBy(workloads.deploymentId);
  return new Map(rows.map((r) => [r.deploymentId, Number(r.n)]));
}
