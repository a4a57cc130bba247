import { and, eq, gte, lt, sql } from 'drizzle-orm';
import { UsageDimension, type UsageRow } from '../../shared/contracts/usage.js';
import { ApiError } from '../kernel/errors.js';
import { apiTokens, workloads } from '../store/schema/index.js';
import type { ServiceCtx } from './service-context.js';

const DAY_MS = 86_400_000;
/** A report covers at most a year, leap day included: the query reads one index range of the workspace's workloads. */
export const USAGE_MAX_DAYS = 366;
/** Without `from`, a report covers the 30 days up to `to` (both included). */
export const USAGE_DEFAULT_DAYS = 30;
const DIMENSIONS = UsageDimension.options;

/** A usage report's scope, checked: whole UTC days from `from` to `to` (both included), grouped by `groupBy`. */
export interface UsageQuery {
  from: string;
  to: string;
  /** In the order of `UsageDimension`, each once. */
  groupBy: UsageDimension[];
}

/** The UTC day `text` names (YYYY-MM-DD, a day the calendar has), or null. */
function dayOf(text: string): Date | null {
  if (!/^\d{4}-\d{2}-\d{2}$/.test(text)) return null;
  const day = new Date(`${text}T00:00:00.000Z`);
  return Number.isNaN(day.getTime()) || day.toISOString().slice(0, 10) !== text ? null : day;
}

const invalid = (message: string) => new ApiError('validation_failed', message);

/**
 * Checks a usage request as the client wrote it and fills in its defaults: `to` today (UTC, by `now`), `from`
 * 30 days up to `to`, grouped by day, token and model. A day the calendar lacks, `from` after `to`, a range over
 * `USAGE_MAX_DAYS` or an unknown dimension is 400 `validation_failed`.
 */
export function usageQuery(input: { from?: string; to?: string; groupBy?: string }, now: Date): UsageQuery {
  const to = input.to === undefined ? new Date(Math.floor(now.getTime() / DAY_MS) * DAY_MS) : dayOf(input.to);
  if (!to) throw invalid('to must be a date YYYY-MM-DD');
  const from = input.from === undefined ? new Date(to.getTime() - (USAGE_DEFAULT_DAYS - 1) * DAY_MS) : dayOf(input.from);
  if (!from) throw invalid('from must be a date YYYY-MM-DD');
  if (from > to) throw invalid('from must not be after to');
  if ((to.getTime() - from.getTime()) / DAY_MS + 1 > USAGE_MAX_DAYS) throw invalid(`a usage report covers at most ${USAGE_MAX_DAYS} days`);
  const named = input.groupBy === undefined ? DIMENSIONS : input.groupBy.split(',');
  if (named.some((name) => !(DIMENSIONS as readonly string[]).includes(name))) throw invalid(`groupBy is a comma-separated list of ${DIMENSIONS.join(', ')}`);
  return { from: from.toISOString().slice(0, 10), to: to.toISOString().slice(0, 10), groupBy: DIMENSIONS.filter((d) => named.includes(d)) };
}

/**
 * The retention window a report covers (`workloadRetentionDays`): requests older than `retentionDays` are deleted,
 * so `retainedFrom` is the first whole UTC day (YYYY-MM-DD) whose requests are all still kept.
 */
export function usageRetention(retentionDays: number, now: Date): { retentionDays: number; retainedFrom: string } {
  const firstKept = Math.floor((now.getTime() - retentionDays * DAY_MS) / DAY_MS) * DAY_MS + DAY_MS;
  return { retentionDays, retainedFrom: new Date(firstKept).toISOString().slice(0, 10) };
}

/**
 * A workspace's inference requests and their tokens, summed in the store per group of `query.groupBy` (a
 * dimension not grouped by is null), ordered by day, token and model. Requests count from when they arrived,
 * whatever became of them; their tokens from the runtime's usage as the relay recorded it.
 */
export async function usageReport({ ctx, input }: { ctx: ServiceCtx; input: { workspaceId: string } & UsageQuery }): Promise<UsageRow[]> {
  const by = new Set(input.groupBy);
  // Selected as written, and grouped and ordered by the same expressions.
  const dimensions = {
    day: { on: by.has('day'), value: sql<string>`to_char(date_trunc('day', ${workloads.createdAt} at time zone 'UTC'), 'YYYY-MM-DD')` },
    tokenId: { on: by.has('token'), value: sql<string>`${workloads.tokenId}` },
    tokenName: { on: by.has('token'), value: sql<string>`${apiTokens.name}` },
    model: { on: by.has('model'), value: sql<string>`${workloads.model}` },
  };
  const selected = (key: keyof typeof dimensions) => (dimensions[key].on ? dimensions[key].value : sql<null>`null::text`);
  const grouped = Object.values(dimensions).flatMap((d) => (d.on ? [d.value] : []));
  const end = new Date(new Date(`${input.to}T00:00:00.000Z`).getTime() + DAY_MS);
  return await ctx.db
    .select({
      day: selected('day'),
      tokenId: selected('tokenId'),
      tokenName: selected('tokenName'),
      model: selected('model'),
      requests: sql`count(*)`.mapWith(Number),
      promptTokens: sql`coalesce(sum(${workloads.promptTokens}), 0)`.mapWith(Number),
      completionTokens: sql`coalesce(sum(${workloads.completionTokens}), 0)`.mapWith(Number),
    })
    .from(workloads)
    .leftJoin(apiTokens, and(eq(apiTokens.id, workloads.tokenId), eq(apiTokens.workspaceId, workloads.workspaceId)))
    .where(and(eq(workloads.workspaceId, input.workspaceId), gte(workloads.createdAt, new Date(`${input.from}T00:00:00.000Z`)), lt(workloads.createdAt, end)))
    .groupBy(...grouped)
    .orderBy(...grouped.map((value) => sql`${value} asc nulls last`));
}
