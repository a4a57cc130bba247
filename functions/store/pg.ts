import pg from 'pg';
import { drizzle } from 'drizzle-orm/node-postgres';
import { migrate } from 'drizzle-orm/node-postgres/migrator';
import * as schema from './schema/index.js';
import type { Db, Store } from './db.js';
import { migrationsFolder } from './migrations-folder.js';

/** A PostgreSQL store through node-postgres (`DATABASE_URL` on Node); migrates before returning. */
export async function openPgStore(url: string, opts: { max?: number; migrate?: boolean } = {}): Promise<Store> {
  const pool = new pg.Pool({ connectionString: url, max: opts.max ?? 10 });
  // A dropped idle connection must not take the process down; the pool replaces it.
  pool.on('error', () => {});
  const db = drizzle({ client: pool, schema });
  if (opts.migrate !== false) await migrate(db, { migrationsFolder: migrationsFolder() });
  return { db: db as unknown as Db, kind: 'pg', close: () => pool.end() };
}
