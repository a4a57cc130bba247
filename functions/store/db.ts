import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core';
import type * as schema from './schema/index.js';

/** Any drizzle Postgres database over our schema: PGlite, node-postgres or Neon. */
export type Db = PgDatabase<PgQueryResultHKT, typeof schema>;

/** The store port: a database plus how to release it. */
export interface Store {
  db: Db;
  /**
   * Single statements that need no connection of their own (Workers: Neon's HTTP driver, one HTTPS request per
   * statement); absent where `db` serves them as cheaply.
   */
  statements?: Db;
  kind: 'pglite' | 'pg' | 'neon';
  close(): Promise<void>;
}
