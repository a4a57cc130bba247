import { sql } from 'drizzle-orm';
import journal from '../store/migrations/meta/_journal.json' with { type: 'json' };
import type { Db } from '../store/db.js';
import { queryRows } from '../store/rows.js';
import { auditOwnedByPlane } from '../store/roles.js';

/** Number of migrations this build ships. */
const SHIPPED_MIGRATIONS = journal.entries.length;

/**
 * Whether the store answers and has every shipped migration applied. An unreachable store is told apart from
 * an unmigrated one: during a database outage the answer must say the store is away, not that it lost its schema.
 * Beside it, whether the plane's role owns the audit log (`auditOwnedByPlane`): shown, not a reason to be unready.
 */
export async function storeReadiness(db: Db): Promise<{ reachable: boolean; migrated: boolean | null; auditOwnedByPlane: boolean | null }> {
  try {
    await queryRows(db, sql`select 1`);
  } catch {
    // Not swallowed: the readiness answer says the store is away (its caller reports that, e.g. a 503).
    return { reachable: false, migrated: null, auditOwnedByPlane: null };
  }
  // Not swallowed: null says it could not be told (the store went away since the line above).
  const auditOwned = await auditOwnedByPlane(db).catch(() => null);
  try {
    const rows = await queryRows<{ n: number }>(db, sql`select count(*)::int as n from drizzle.__drizzle_migrations`);
    return { reachable: true, migrated: (rows[0]?.n ?? 0) >= SHIPPED_MIGRATIONS, auditOwnedByPlane: auditOwned };
  } catch {
    // The migrations table does not exist yet: reachable, nothing applied.
    return { reachable: true, migrated: false, auditOwnedByPlane: auditOwned };
  }
}
