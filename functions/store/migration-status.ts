import { sql } from 'drizzle-orm';
import journal from './migrations/meta/_journal.json' with { type: 'json' };
import type { Db } from './db.js';
import { queryRows } from './rows.js';

/** Number of migrations this build ships. */
export const SHIPPED_MIGRATIONS = journal.entries.length;

/** True when every shipped migration is recorded as applied in the store. */
export async function isMigrated(db: Db): Promise<boolean> {
  try {
    const rows = await queryRows<{ n: number }>(db, sql`select count(*)::int as n from drizzle.__drizzle_migrations`);
    return (rows[0]?.n ?? 0) >= SHIPPED_MIGRATIONS;
  } catch {
    return false;
  }
}
