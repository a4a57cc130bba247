import { and, asc, eq, gte, inArray, isNull, lt, sql } from 'drizzle-orm';
import type { DeploymentTelemetry, GpuSample, MachineTelemetry, TelemetryQuery } from '../../shared/contracts/telemetry.js';
import { bucketize } from '../core/telemetry/series.js';
import { ApiError } from '../kernel/errors.js';
import { dbNow } from '../store/rows.js';
import { deployments, machines, type SampledRuntime, telemetrySamples, workloads } from '../store/schema/index.js';
import type { ServiceCtx } from './service-context.js';

const GPU_KEYS = ['utilizationPercent', 'memoryUsedMiB', 'temperatureC', 'powerDrawW'] as const;
/** Summed over a deployment's machines: each machine's own bucket mean, then the sum. */
const SUMMED = ['replicas', 'queueDepth', 'inFlight'] as const;

function windowOf(now: Date, query: TelemetryQuery) {
  const to = now.getTime();
  return { from: to - query.minutes * 60_000, to, points: query.points };
}

const iso = (ms: number) => new Date(ms).toISOString();

/** A machine's GPUs over the last `minutes` (docs/telemetry.md), from its kept samples. */
export async function machineTelemetry({
  ctx,
  input,
}: {
  ctx: ServiceCtx;
  input: { workspaceId: string; machineId: string; query: TelemetryQuery };
}): Promise<MachineTelemetry> {
  const [machine] = await ctx.db
    .select({ id: machines.id })
    .from(machines)
    .where(and(eq(machines.id, input.machineId), eq(machines.workspaceId, input.workspaceId)));
  if (!machine) throw new ApiError('not_found', `machine ${input.machineId} not found`);
  const window = windowOf(await dbNow(ctx.db), input.query);
  const rows = await ctx.db
    .select({ at: telemetrySamples.at, gpus: telemetrySamples.gpus })
    .from(telemetrySamples)
    .where(and(eq(telemetrySamples.machineId, input.machineId), gte(telemetrySamples.at, new Date(window.from))))
    .orderBy(asc(telemetrySamples.at));
  return gpuSeries(input.machineId, rows, window);
}

/** The GPUs over time of every machine of a workspace that kept samples in the window (the console's fleet page). */
export async function workspaceGpuTelemetry({
  ctx,
  input,
}: {
  ctx: ServiceCtx;
  input: { workspaceId: string; query: TelemetryQuery };
}): Promise<MachineTelemetry[]> {
  const window = windowOf(await dbNow(ctx.db), input.query);
  const rows = await ctx.db
    .select({ machineId: telemetrySamples.machineId, at: telemetrySamples.at, gpus: telemetrySamples.gpus })
    .from(telemetrySamples)
    .where(and(eq(telemetrySamples.workspaceId, input.workspaceId), gte(telemetrySamples.at, new Date(window.from))))
    .orderBy(asc(telemetrySamples.at));
  const byMachine = new Map<string, typeof rows>();
  for (const row of rows) {
    const mine = byMachine.get(row.machineId);
    if (mine) mine.push(row);
    else byMachine.set(row.machineId, [row]);
  }
  return [...byMachine].map(([machineId, mine]) => gpuSeries(machineId, mine, window));
}

/** Per GPU of one machine, its samples in the window's buckets. */
function gpuSeries(
  machineId: string,
  rows: ReadonlyArray<{ at: Date; gpus: GpuSample[] }>,
  window: { from: number; to: number; points: number },
): MachineTelemetry {
  const indices = [...new Set(rows.flatMap((r) => r.gpus.map((g) => g.index)))].sort((a, b) => a - b);
  const gpus = indices.map((index) => {
    const samples = rows.flatMap((r) => r.gpus.filter((g) => g.index === index).map((g) => ({ at: r.at.getTime(), values: g })));
    return { index, points: bucketize(samples, GPU_KEYS, window).buckets.map((b) => ({ at: iso(b.at), ...b.values })) };
  });
  return { machineId, from: iso(window.from), to: iso(window.to), stepMs: bucketize([], GPU_KEYS, window).stepMs, gpus };
}

/**
 * Deployments over the last `minutes`, in the order of `names` (each a 404 when it is not a live deployment): their
 * replicas, queue and in-flight requests from their machines' samples, read once for all of them, and TTFT p95,
 * tokens per second and requests from their workload records (summed in the store, per bucket).
 */
export async function deploymentTelemetry({
  ctx,
  input,
}: {
  ctx: ServiceCtx;
  input: { workspaceId: string; names: readonly string[]; query: TelemetryQuery };
}): Promise<DeploymentTelemetry[]> {
  if (input.names.length === 0) return [];
  const found = await ctx.db
    .select({ id: deployments.id, name: deployments.name })
    .from(deployments)
    .where(and(eq(deployments.workspaceId, input.workspaceId), inArray(deployments.name, [...input.names]), isNull(deployments.deletedAt)));
  const ids = new Map(found.map((d) => [d.name, d.id]));
  for (const name of input.names) if (!ids.has(name)) throw new ApiError('not_found', `deployment ${name} not found`);
  const window = windowOf(await dbNow(ctx.db), input.query);
  const rows = await ctx.db
    .select({ machineId: telemetrySamples.machineId, at: telemetrySamples.at, runtimes: telemetrySamples.runtimes })
    .from(telemetrySamples)
    .where(and(eq(telemetrySamples.workspaceId, input.workspaceId), gte(telemetrySamples.at, new Date(window.from))))
    .orderBy(asc(telemetrySamples.at));
  const series: DeploymentTelemetry[] = [];
  for (const name of input.names) series.push(await deploymentSeries(ctx, name, ids.get(name)!, rows, window));
  return series;
}

const mean = (values: number[]) => (values.length ? values.reduce((a, b) => a + b, 0) / values.length : null);
const present = (values: Array<number | null | undefined>) => values.filter((v): v is number => typeof v === 'number');

/** One deployment's series from the workspace's samples in the window and its own requests. */
async function deploymentSeries(
  ctx: ServiceCtx,
  name: string,
  deploymentId: string,
  rows: ReadonlyArray<{ machineId: string; at: Date; runtimes: SampledRuntime[] }>,
  window: { from: number; to: number; points: number },
): Promise<DeploymentTelemetry> {
  const byMachine = new Map<string, Array<{ at: number; values: Record<(typeof SUMMED)[number] | 'kvCacheUsage', number | null> }>>();
  for (const row of rows) {
    const mine = row.runtimes.filter((r) => r.deploymentId === deploymentId);
    if (mine.length === 0) continue;
    const samples = byMachine.get(row.machineId) ?? [];
    samples.push({
      at: row.at.getTime(),
      values: {
        replicas: mine.filter((r) => r.state === 'ready').length,
        // Waiting at the agent for the runtime's head, and inside the engine for a sequence slot.
        queueDepth: mine.reduce((sum, r) => sum + r.queueDepth + (r.engine?.requestsWaiting ?? 0), 0),
        inFlight: mine.reduce((sum, r) => sum + r.activeInvocations, 0),
        kvCacheUsage: mean(present(mine.map((r) => r.engine?.kvCacheUsage))),
      },
    });
    byMachine.set(row.machineId, samples);
  }
  const keys = [...SUMMED, 'kvCacheUsage'] as const;
  const perMachine = [...byMachine.values()].map((samples) => bucketize(samples, keys, window));
  const { stepMs, buckets } = bucketize([], keys, window);
  const requests = await requestBuckets(ctx, deploymentId, window.from, stepMs);
  return {
    deployment: name,
    from: iso(window.from),
    to: iso(window.to),
    stepMs,
    points: buckets.map((bucket, i) => {
      const summed = Object.fromEntries(
        SUMMED.map((key) => {
          const values = present(perMachine.map((m) => m.buckets[i]!.values[key]));
          return [key, values.length ? values.reduce((a, b) => a + b, 0) : null];
        }),
      ) as Record<(typeof SUMMED)[number], number | null>;
      const served = requests.get(i);
      return {
        at: iso(bucket.at),
        ...summed,
        kvCacheUsage: mean(present(perMachine.map((m) => m.buckets[i]!.values.kvCacheUsage))),
        ttftP95Ms: served?.ttftP95Ms ?? null,
        tokensPerSecond: served ? served.tokens / (stepMs / 1000) : null,
        requests: served?.count ?? 0,
      };
    }),
  };
}

/** Per bucket index from `from`: the deployment's requests started then, their TTFT p95 and their tokens. */
async function requestBuckets(ctx: ServiceCtx, deploymentId: string, from: number, stepMs: number) {
  const bucket = sql<number>`floor((extract(epoch from ${workloads.createdAt}) * 1000 - ${from}::float8) / ${stepMs}::float8)::int`;
  const rows = await ctx.db
    .select({
      bucket,
      count: sql<number>`count(*)::int`,
      ttftP95Ms: sql<number | null>`percentile_cont(0.95) within group (order by ${workloads.firstByteMs})`,
      tokens: sql<number>`coalesce(sum(${workloads.completionTokens}), 0)::float8`,
    })
    .from(workloads)
    .where(and(eq(workloads.deploymentId, deploymentId), gte(workloads.createdAt, new Date(from))))
    // By position: the bucket's expression carries parameters, and a repeated one would be another expression.
    .groupBy(sql`1`);
  return new Map(
    rows.map((r) => [Number(r.bucket), { count: Number(r.count), ttftP95Ms: r.ttftP95Ms === null ? null : Number(r.ttftP95Ms), tokens: Number(r.tokens) }]),
  );
}

/** What each machine's node reported of its GPUs since `since` (its kept samples, oldest first): a gate's evidence. */
export async function gpusReportedSince(ctx: ServiceCtx, machineIds: string[], since: Date): Promise<Map<string, Array<{ at: string; gpus: GpuSample[] }>>> {
  const reported = new Map<string, Array<{ at: string; gpus: GpuSample[] }>>();
  if (machineIds.length === 0) return reported;
  const rows = await ctx.db
    .select({ machineId: telemetrySamples.machineId, at: telemetrySamples.at, gpus: telemetrySamples.gpus })
    .from(telemetrySamples)
    .where(and(inArray(telemetrySamples.machineId, machineIds), gte(telemetrySamples.at, since)))
    .orderBy(asc(telemetrySamples.at));
  for (const row of rows) {
    const mine = reported.get(row.machineId) ?? [];
    mine.push({ at: row.at.toISOString(), gpus: row.gpus });
    reported.set(row.machineId, mine);
  }
  return reported;
}

/** Deletes the samples older than `retentionHours`, oldest first, at most `limit` a call (a backlog drains over ticks). */
export async function sweepTelemetry(ctx: ServiceCtx, retentionHours: number, limit: number): Promise<number> {
  const old = await ctx.db
    .select({ machineId: telemetrySamples.machineId, at: telemetrySamples.at })
    .from(telemetrySamples)
    .where(lt(telemetrySamples.at, sql`now() - make_interval(hours => ${retentionHours})`))
    .orderBy(asc(telemetrySamples.at))
    .limit(limit);
  if (old.length === 0) return 0;
  const oldest = old[old.length - 1]!.at;
  const machineIds = [...new Set(old.map((o) => o.machineId))];
  const deleted = await ctx.db
    .delete(telemetrySamples)
    .where(
      and(
        inArray(telemetrySamples.machineId, machineIds),
        lt(telemetrySamples.at, sql`now() - make_interval(hours => ${retentionHours})`),
        sql`${telemetrySamples.at} <= ${oldest}`,
      ),
    )
    .returning({ at: telemetrySamples.at });
  return deleted.length;
}
