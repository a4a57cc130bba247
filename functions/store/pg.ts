import pg from 'pg';
import { drizzle } from 'drizzle-orm/node-postgres';
import { migrate } from 'drizzle-orm/node-postgres/migrator';
import * as schema from './schema/index.js';
import type { Db, Store } from './db.js';
import { migrationsFolder } from './migrations-folder.js';

/** A PostgreSQL store through node-postgres (`DATABASE_URL` on Node); migrates before returning. */
export async function openPgStore(url: string, opts: { max?: number; migrate?: boolean } = {}): Promise<Store> {
  // A store that stops answering (a partition sends no error) fails requests with 503 after a bound instead of
  // holding them: connecting gives up after 10 s, and a checked-out wait for a free client after as long.
  const pool = new pg.Pool({ connectionString: url, max: opts.max ?? 10, connectionTimeoutMillis: 10_000 });
  // A dropped idle connection must not take the process down; the pool replaces it.
  pool.on('error', () => {});
  // Nor one dropped while checked out between two statements (a transaction's, when the server shuts down): the
  // pool listens only to idle clients, and the holder's next statement fails with the error anyway.
  pool.on('connect', (client) => client.on('error', () => {}));
  const db = drizzle({ client: pool, schema });
  if (opts.migrate !== false) await migrate(db, { migrationsFolder: migrationsFolder() });
  return { db: db as unknown as Db, kind: 'pg', close: () => pool.end() };
}
