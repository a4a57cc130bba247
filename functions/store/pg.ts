import pg from 'pg';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { migrate } from 'drizzle-orm/node-postgres/migrator';
import * as schema from './schema/index.js';
import type { Db, Store } from './db.js';
import { migrationsFolder } from './migrations-folder.js';
import { migrateAsOwner } from './owner-migrate.js';
import { auditOwnedByPlane, requireMigrated } from './roles.js';

/**
 * A PostgreSQL store through node-postgres (`DATABASE_URL` on Node); migrates before returning. With `ownerUrl`
 * the migrations run as that role, which owns the tables, and this connection's role gets only what the control
 * plane needs of them (`migrateAsOwner`). Without it, as this connection's own role, which then owns them; unless
 * another role owns them already (migrated apart, e.g. by `npm run db:migrate`, so that the owner's password
 * need not be in every instance's environment).
 */
export async function openPgStore(url: string, opts: { max?: number; migrate?: boolean; ownerUrl?: string } = {}): Promise<Store> {
  // A store that stops answering (a partition sends no error) fails requests with 503 after a bound instead of
  // holding them: connecting gives up after 10 s, and a checked-out wait for a free client after as long.
  const pool = new pg.Pool({ connectionString: url, max: opts.max ?? 10, connectionTimeoutMillis: 10_000 });
  // A dropped idle connection must not take the process down; the pool replaces it.
  pool.on('error', () => {});
  // Nor one dropped while checked out between two statements (a transaction's, when the server shuts down): the
  // pool listens only to idle clients, and the holder's next statement fails with the error anyway.
  pool.on('connect', (client) => client.on('error', () => {}));
  const db = drizzle({ client: pool, schema });
  if (opts.migrate !== false) {
    // A store that cannot start leaves no connection behind (db:migrate, a test that expects the refusal).
    await bringUpToDate(pool, db, opts.ownerUrl).catch(async (error: unknown) => {
      await pool.end();
      throw error;
    });
  }
  return { db: db as unknown as Db, kind: 'pg', close: () => pool.end() };
}

/**
 * Applies the migrations not applied yet: as `ownerUrl`'s role when given, else as the pool's own role; unless
 * another role owns the tables, which this one then cannot alter: only that they are up to date is checked.
 */
async function bringUpToDate(pool: pg.Pool, db: NodePgDatabase<typeof schema>, ownerUrl: string | undefined): Promise<void> {
  if (ownerUrl) {
    const { rows } = await pool.query<{ role: string }>('select current_user as role');
    await migrateAsOwner(ownerUrl, rows[0]!.role);
  } else if ((await auditOwnedByPlane(db as unknown as Db)) === false) {
    await requireMigrated(db as unknown as Db);
  } else {
    await migrate(db, { migrationsFolder: migrationsFolder() });
  }
}
