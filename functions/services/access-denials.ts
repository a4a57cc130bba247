import { and, like, lt, sql } from 'drizzle-orm';
import { tokenRateWindows } from '../store/schema/index.js';
import { audit, withTransaction, type ServiceCtx } from './service-context.js';

/** A refused management request of a known token: whose, which route, its role and the one the route needs. */
interface AccessDenial {
  workspaceId: string;
  tokenId: string;
  /** `GET /api/v1/machines`: the method and the route's pattern, never the raw path. */
  target: string;
  role: string;
  required: string;
}

/** Refusals are counted in the rate-limit windows under this prefix and their JSON (`token_rate_windows`). */
const DENIED_PREFIX = 'denied:';

const windowKey = (denial: AccessDenial): string =>
  `${DENIED_PREFIX}${JSON.stringify([denial.workspaceId, denial.tokenId, denial.target, denial.role, denial.required])}`;

function parseKey(key: string): AccessDenial | null {
  try {
    const [workspaceId, tokenId, target, role, required] = JSON.parse(key.slice(DENIED_PREFIX.length)) as unknown[];
    if ([workspaceId, tokenId, target, role, required].some((v) => typeof v !== 'string')) return null;
    return { workspaceId, tokenId, target, role, required } as AccessDenial;
  } catch {
    return null;
  }
}

/**
 * Records a refused management request (`access.denied`, outcome `denied`), aggregated per token and route over
 * the database clock's minute: the first refusal of the minute is an entry at once, the others only count (one
 * upsert); `summarizeAccessDenials` records the minute's count once it has ended. A token that keeps asking
 * adds at most two entries per route and minute, however fast it asks. Acts as the refused token.
 */
export async function recordAccessDenial({ ctx, input }: { ctx: ServiceCtx; input: AccessDenial }): Promise<void> {
  await withTransaction(ctx, async (tx) => {
    const [row] = await tx.db
      .insert(tokenRateWindows)
      .values({ tokenId: windowKey(input), windowStart: sql`date_trunc('minute', now())`, count: 1 })
      .onConflictDoUpdate({ target: [tokenRateWindows.tokenId, tokenRateWindows.windowStart], set: { count: sql`${tokenRateWindows.count} + 1` } })
      .returning({ count: tokenRateWindows.count });
    if (row!.count !== 1) return;
    await audit(tx, {
      workspaceId: input.workspaceId,
      action: 'access.denied',
      target: input.target,
      outcome: 'denied',
      details: { role: input.role, required: input.required },
    });
  });
}

/**
 * Closes the refusal windows of minutes that have ended (controller tick, before the rate-limit windows are swept):
 * each one that counted more than its first refusal becomes one more `access.denied` entry, in the refused token's
 * name, with `details.count` (every refusal of the minute, the first included) and `details.windowStart`. The
 * windows are deleted in the same transaction as the entries are written, so each minute is recorded once, whichever
 * instance's tick gets there.
 */
export async function summarizeAccessDenials({ ctx }: { ctx: ServiceCtx }): Promise<void> {
  await withTransaction(ctx, async (tx) => {
    const ended = await tx.db
      .delete(tokenRateWindows)
      .where(and(like(tokenRateWindows.tokenId, `${DENIED_PREFIX}%`), lt(tokenRateWindows.windowStart, sql`date_trunc('minute', now())`)))
      .returning();
    ended.sort((x, y) => x.windowStart.getTime() - y.windowStart.getTime() || (x.tokenId < y.tokenId ? -1 : 1));
    for (const window of ended) {
      const denial = window.count > 1 ? parseKey(window.tokenId) : null;
      if (!denial) continue;
      await audit(
        { ...tx, actor: denial.tokenId },
        {
          workspaceId: denial.workspaceId,
          action: 'access.denied',
          target: denial.target,
          outcome: 'denied',
          details: { role: denial.role, required: denial.required, count: window.count, windowStart: window.windowStart.toISOString() },
        },
      );
    }
  });
}
