import { dbNow } from '../store/rows.js';
import type { Db } from '../store/db.js';

/** How long the measured offset of the database's clock from this instance's is reused. */
const DB_OFFSET_TTL_MS = 10_000;

/**
 * The database's clock as this instance reads it (machine tokens are judged by it): its offset from the local clock
 * is measured (on the caller's store) at most every DB_OFFSET_TTL_MS and shared by concurrent callers, so a fleet asking at once costs the
 * database one query.
 */
export function databaseClock(): (db: Db) => Promise<number> {
  let cached: { offsetMs: number; until: number } | undefined;
  let measuring: Promise<number> | undefined;
  const offsetMs = async (db: Db): Promise<number> => {
    if (cached && cached.until > performance.now()) return cached.offsetMs;
    measuring ??= (async () => {
      const sentAt = Date.now();
      const measured = (await dbNow(db)).getTime() - (sentAt + Date.now()) / 2;
      cached = { offsetMs: measured, until: performance.now() + DB_OFFSET_TTL_MS };
      return measured;
    })().finally(() => (measuring = undefined));
    return await measuring;
  };
  return async (db) => Math.round(Date.now() + (await offsetMs(db)));
}
