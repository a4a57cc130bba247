import type { Hono } from 'hono';
import type { ServerTime } from '../../../shared/contracts/time.js';
import { dbNow } from '../../store/rows.js';
import type { Db } from '../../store/db.js';
import type { AppEnv } from '../../dataplane/ports.js';

/** How long the measured offset of the database's clock from this instance's is reused. */
const DB_OFFSET_TTL_MS = 10_000;

/**
 * GET /agent/v1/time: the clock machine tokens are judged by (the database's), for agents to measure their
 * offset from. Unauthenticated, like a response's `Date` header, of which it is the precise form; the database
 * is asked at most every DB_OFFSET_TTL_MS, so a fleet measuring at once costs it nothing.
 */
export function registerTime(app: Hono<AppEnv>) {
  let cached: { offsetMs: number; until: number } | undefined;
  let measuring: Promise<number> | undefined;
  const dbOffsetMs = async (db: Db): Promise<number> => {
    if (cached && cached.until > performance.now()) return cached.offsetMs;
    measuring ??= (async () => {
      const sentAt = Date.now();
      const offsetMs = (await dbNow(db)).getTime() - (sentAt + Date.now()) / 2;
      cached = { offsetMs, until: performance.now() + DB_OFFSET_TTL_MS };
      return offsetMs;
    })().finally(() => (measuring = undefined));
    return await measuring;
  };
  app.get('/time', async (c) => {
    const body: ServerTime = { now: Math.round(Date.now() + (await dbOffsetMs(c.get('ports').store.db))) };
    c.header('Cache-Control', 'no-store');
    return c.json(body);
  });
}
