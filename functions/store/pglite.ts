import { PGlite } from '@electric-sql/pglite';
import { drizzle } from 'drizzle-orm/pglite';
import { migrate } from 'drizzle-orm/pglite/migrator';
import * as schema from './schema/index.js';
import type { Db, Store } from './db.js';
import { migrationsFolder } from './migrations-folder.js';

/** The embedded store: PGlite persisted under `dir` (or in memory when `dir` is undefined). */
export async function openPgliteStore(dir?: string): Promise<Store> {
  const client = new PGlite(dir);
  await client.waitReady;
  const db = drizzle({ client, schema });
  await migrate(db, { migrationsFolder: migrationsFolder() });
  return { db: db as unknown as Db, kind: 'pglite', close: () => client.close() };
}
