import pg from 'pg';
import { drizzle } from 'drizzle-orm/node-postgres';
import { migrate } from 'drizzle-orm/node-postgres/migrator';
import { migrationsFolder } from './migrations-folder.js';

/**
 * Applies the committed migrations as the role of `ownerUrl`, which thereby owns every table, then grants `appRole`
 * (the control plane's own role, DATABASE_URL's) what the control plane does with them: reading and writing every
 * table but `audit_events`, which it may only read and append to, and reading the applied migrations, which
 * /readyz counts. Not the table's owner, the app role cannot switch its append-only trigger off (ALTER TABLE needs
 * ownership), and without UPDATE, DELETE or TRUNCATE its statements are refused before the trigger is even asked
 * (docs/security.md, "Audit log"; security review 2, L4).
 *
 * Granted again after every run, so that a table a migration adds is covered. In one transaction, so that no
 * instance sees the app role between the audit table's revoke and its grant; under an advisory lock, because
 * instances starting together would otherwise grant on the same rows at once, which PostgreSQL refuses ("tuple
 * concurrently updated"). Nothing to grant when both URLs name the same role: it owns the tables.
 */
export async function migrateAsOwner(ownerUrl: string, appRole: string): Promise<void> {
  const client = new pg.Client({ connectionString: ownerUrl, connectionTimeoutMillis: 10_000 });
  // A connection lost between two statements fails the next one, which says so; unheard, it would end the process.
  client.on('error', () => {});
  await client.connect();
  try {
    await migrate(drizzle({ client }), { migrationsFolder: migrationsFolder() });
    const { rows } = await client.query<{ owner: string; schema: string }>('select current_user as owner, current_schema() as schema');
    const { owner, schema } = rows[0]!;
    if (owner === appRole) return;
    const app = pg.escapeIdentifier(appRole);
    const tables = pg.escapeIdentifier(schema);
    await client.query(`
      begin;
      select pg_advisory_xact_lock(hashtext('lunanexa:grants'));
      grant usage on schema ${tables} to ${app};
      grant select, insert, update, delete on all tables in schema ${tables} to ${app};
      grant usage on all sequences in schema ${tables} to ${app};
      revoke all on table ${tables}.audit_events from ${app};
      grant select, insert on table ${tables}.audit_events to ${app};
      grant usage on schema drizzle to ${app};
      grant select on table drizzle.__drizzle_migrations to ${app};
      commit;
    `);
  } finally {
    await client.end();
  }
}
