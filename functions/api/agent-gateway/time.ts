import type { Hono } from 'hono';
import type { ServerTime } from '../../../shared/contracts/time.js';
import { databaseClock } from '../../services/db-clock.js';
import type { AppEnv } from '../../dataplane/ports.js';

/**
 * GET /agent/v1/time: the clock machine tokens are judged by (the database's), for agents to measure their
 * offset from. Unauthenticated, like a response's `Date` header, of which it is the precise form.
 */
export function registerTime(app: Hono<AppEnv>) {
  const now = databaseClock();
  app.get('/time', async (c) => {
    const body: ServerTime = { now: await now(c.get('ports').store.db) };
    c.header('Cache-Control', 'no-store');
    return c.json(body);
  });
}
