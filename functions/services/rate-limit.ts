import { lt, sql } from 'drizzle-orm';
import { tokenRateWindows } from '../store/schema/index.js';
import type { Db } from '../store/db.js';

/** Rate limits count requests in fixed windows of one minute, aligned on the database clock's minutes. */
export const RATE_WINDOW_MS = 60_000;

/** Whole seconds from `nowMs` to the end of its window, at least 1 (what `Retry-After` says). */
export function retryAfterSeconds(nowMs: number): number {
  const windowEndMs = Math.floor(nowMs / RATE_WINDOW_MS) * RATE_WINDOW_MS + RATE_WINDOW_MS;
  return Math.max(1, Math.ceil((windowEndMs - nowMs) / 1000));
}

export type RateVerdict = { ok: true } | { ok: false; retryAfterS: number };

/** The verdict on the `count`-th request of a window (this one included) for a token allowed `limit` per window. */
export function rateVerdict(input: { count: number; limit: number; nowMs: number }): RateVerdict {
  return input.count <= input.limit ? { ok: true } : { ok: false, retryAfterS: retryAfterSeconds(input.nowMs) };
}

/**
 * Counts one request of a rate-limited token and judges it. One statement, exact across instances: the upsert
 * serialises on the (token, window) row, and the window and the time are the database's, never an instance's.
 * A refused request counts too, so a client that keeps hammering stays refused until the window ends. `/v1` and
 * the management API (`api`) count apart: the key of the latter is `api:<token id>`.
 */
export async function countTokenRequest(db: Db, input: { tokenId: string; limit: number; surface?: 'v1' | 'api' }): Promise<RateVerdict> {
  return await countWindow(db, { key: input.surface === 'api' ? `api:${input.tokenId}` : input.tokenId, limit: input.limit });
}

/**
 * Counts one console sign-in attempt of a client address and judges it, as `countTokenRequest` does, under the key
 * `sign-in:<address>` (no token id starts so). A limit of 0 counts nothing.
 */
export async function countSignInAttempt(db: Db, input: { address: string; limit: number }): Promise<RateVerdict> {
  if (input.limit === 0) return { ok: true };
  return await countWindow(db, { key: `sign-in:${input.address.slice(0, 100)}`, limit: input.limit });
}

async function countWindow(db: Db, input: { key: string; limit: number }): Promise<RateVerdict> {
  const [row] = await db
    .insert(tokenRateWindows)
    .values({ tokenId: input.key, windowStart: sql`date_trunc('minute', now())`, count: 1 })
    .onConflictDoUpdate({ target: [tokenRateWindows.tokenId, tokenRateWindows.windowStart], set: { count: sql`${tokenRateWindows.count} + 1` } })
    .returning({ count: tokenRateWindows.count, nowMs: sql<string | number>`(extract(epoch from now()) * 1000)::float8` });
  return rateVerdict({ count: row!.count, limit: input.limit, nowMs: Number(row!.nowMs) });
}

/**
 * Deletes the windows no request counts in any more (controller tick): five minutes leaves the current window
 * alone even across instances whose ticks run late.
 */
export async function sweepRateWindows(db: Db): Promise<void> {
  await db.delete(tokenRateWindows).where(lt(tokenRateWindows.windowStart, sql`now() - interval '5 minutes'`));
}
