import pg from 'pg';
import { describe } from 'vitest';

/** Admin URL of the real PostgreSQL the suites use (set by .ci/run); each suite makes its own database. */
export const PG_URL = process.env.LUNANEXA_TEST_PG_URL;

if (!PG_URL && process.env.CI) throw new Error('LUNANEXA_TEST_PG_URL must be set in CI: .ci/run starts PostgreSQL and sets it');

/**
 * `describe` for suites that need the real PostgreSQL server. Without LUNANEXA_TEST_PG_URL (a developer
 * machine with no server running) they are reported as skipped, never silently passed; CI always sets it.
 */
export const describePg = PG_URL ? describe : describe.skip;

/** Creates a throwaway database on the server at `adminUrl` and returns its URL and a dropper. */
export async function createTestDatabase(adminUrl = PG_URL): Promise<{ url: string; drop(): Promise<void> }> {
  if (!adminUrl) throw new Error('LUNANEXA_TEST_PG_URL is not set');
  const name = `lnx_test_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 8)}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`create database ${name}`);
  await admin.end();
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    async drop() {
      const client = new pg.Client({ connectionString: adminUrl });
      await client.connect();
      await client.query(`drop database if exists ${name} with (force)`);
      await client.end();
    },
  };
}
