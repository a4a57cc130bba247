import { sql } from 'drizzle-orm';
import journal from './migrations/meta/_journal.json' with { type: 'json' };
import type { Db } from './db.js';
import { queryRows } from './rows.js';

/**
 * Whether the connection's role may act as the owner of `audit_events` (owns it, is a member of the role that does,
 * or is a superuser): such a role can switch the append-only trigger off and cut or rewrite the log, and a chain
 * cut at its end still verifies (docs/security.md, "Audit log"). True where one role both migrates and serves (the
 * embedded store, DATABASE_URL without LUNANEXA_DATABASE_OWNER_URL); null while the table does not exist.
 */
export async function auditOwnedByPlane(db: Db): Promise<boolean | null> {
  const rows = await queryRows<{ owned: boolean }>(
    db,
    sql`select pg_has_role(current_user, relowner, 'MEMBER') as owned from pg_class where oid = to_regclass('audit_events')`,
  );
  return rows[0]?.owned ?? null;
}

/**
 * For a role that does not own the tables and so cannot migrate them: fails unless the owner has applied every
 * migration this build ships, rather than serve a schema older than the code.
 */
export async function requireMigrated(db: Db): Promise<void> {
  const [row] = await queryRows<{ n: number }>(db, sql`select count(*)::int as n from drizzle.__drizzle_migrations`);
  const pending = journal.entries.length - (row?.n ?? 0);
  if (pending > 0) {
    throw new Error(
      `${pending} migration(s) pending, and DATABASE_URL's role does not own the tables to apply them: set LUNANEXA_DATABASE_OWNER_URL ` +
        '(at start, or for `npm run db:migrate`) to the role that does (docs/operations.md, "Database roles")',
    );
  }
}
