import { Pool, neonConfig } from '@neondatabase/serverless';
import { drizzle } from 'drizzle-orm/neon-serverless';
import * as schema from './schema/index.js';
import type { Db, Store } from './db.js';

/**
 * The Workers store: Neon's serverless driver over WebSockets. `wsProxy` (host:port/path) points it at a
 * WebSocket-to-TCP proxy in front of a plain PostgreSQL, as the tests do; without it Neon's own proxy is used.
 * A Worker request gets at most `max` connections, opened as its queries need them and closed with it.
 */
export function openNeonStore(url: string, opts: { wsProxy?: string; max: number; idleTimeoutMs?: number }): Store {
  if (opts.wsProxy) {
    const proxy = opts.wsProxy;
    neonConfig.wsProxy = (host, port) => `${proxy}?address=${host}:${port}`;
    neonConfig.useSecureWebSocket = false;
    neonConfig.pipelineTLS = false;
    neonConfig.pipelineConnect = false;
  }
  // `max` bounds the connections one request (or one machine's object) may open; `idleTimeoutMs` keeps one open
  // across a stream's keep-alives.
  const pool = new Pool({ connectionString: url, max: opts.max, ...(opts.idleTimeoutMs ? { idleTimeoutMillis: opts.idleTimeoutMs } : {}) });
  const db = drizzle({ client: pool, schema });
  return { db: db as unknown as Db, kind: 'neon', close: () => pool.end() };
}
