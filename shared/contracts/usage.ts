import { z } from 'zod';

/** What usage can be grouped by: the UTC day a request arrived, the API token that made it, the model it asked for. */
export const UsageDimension = z.enum(['day', 'token', 'model']);
export type UsageDimension = z.infer<typeof UsageDimension>;

/**
 * One group of a workspace's inference requests (docs/operations.md, "Usage"). A dimension the report is not
 * grouped by is null, as are the token and model of requests recorded before usage was (and the name of a token
 * that no longer exists). Token counts add what the runtimes reported (`recordedTokens`): a request whose count
 * is unknown adds nothing.
 */
export const UsageRow = z.object({
  /** YYYY-MM-DD, UTC. */
  day: z.string().nullable(),
  tokenId: z.string().nullable(),
  tokenName: z.string().nullable(),
  model: z.string().nullable(),
  requests: z.number().int().nonnegative(),
  promptTokens: z.number().int().nonnegative(),
  completionTokens: z.number().int().nonnegative(),
});
export type UsageRow = z.infer<typeof UsageRow>;

/** The columns of a usage report, in order: also its CSV header. */
export const USAGE_COLUMNS = ['day', 'tokenId', 'tokenName', 'model', 'requests', 'promptTokens', 'completionTokens'] as const satisfies ReadonlyArray<
  keyof UsageRow
>;

/**
 * `GET /api/v1/usage`: the days it covers (both included) and how it is grouped, with its rows, and the retention
 * window the store keeps requests for: `retentionDays`, and `retainedFrom`, the first whole UTC day still kept
 * (days before it count only the requests not yet deleted).
 */
export const UsageReport = z.object({
  from: z.string(),
  to: z.string(),
  groupBy: z.array(UsageDimension),
  retentionDays: z.number().int(),
  retainedFrom: z.string(),
  data: z.array(UsageRow),
});
export type UsageReport = z.infer<typeof UsageReport>;
