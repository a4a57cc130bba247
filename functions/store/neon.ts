import { Pool, neon, neonConfig } from '@neondatabase/serverless';
import { drizzle } from 'drizzle-orm/neon-serverless';
import { drizzle as drizzleHttp } from 'drizzle-orm/neon-http';
import * as schema from './schema/index.js';
import type { Db, Store } from './db.js';

/**
 * The Workers store: Neon's serverless driver over WebSockets, and its HTTP driver for single statements
 * (`statements`: one HTTPS request each, no connection to open). `wsProxy` (host:port/path) and `sqlEndpoint` (a
 * URL) point them at stand-ins in front of a plain PostgreSQL, as the tests do; without them Neon's own proxy and
 * SQL endpoint are used. A Worker request gets at most `max` connections, opened as its queries need them and
 * closed with it.
 */
export function openNeonStore(url: string, opts: { wsProxy?: string; sqlEndpoint?: string; max: number; idleTimeoutMs?: number }): Store {
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
  if (opts.sqlEndpoint) neonConfig.fetchEndpoint = opts.sqlEndpoint;
  const db = drizzle({ client: pool, schema });
  const statements = drizzleHttp({ client: neon(url), schema });
  return { db: db as unknown as Db, statements: statements as unknown as Db, kind: 'neon', close: () => pool.end() };
}
