import { sql, type SQL } from 'drizzle-orm';
import type { Db } from './db.js';

/** Runs raw SQL and returns its rows, whatever the driver's result shape. */
export async function queryRows<T>(db: Db, query: SQL): Promise<T[]> {
  const result = (await db.execute(query)) as unknown;
  return (Array.isArray(result) ? result : (result as { rows: T[] }).rows) as T[];
}

/** The database's clock: every liveness and expiry judgement uses it, never the caller's. */
export async function dbNow(db: Db): Promise<Date> {
  const [row] = await queryRows<{ now: string | Date }>(db, sql`select now() as now`);
  return new Date(row!.now);
}

/**
 * One array parameter holding a column of a batch, for `unnest($1::text[], ...)` inserts: the statement's
 * text and parameter count stay the same whatever the batch size.
 */
export const column = <T>(rows: T[], value: (row: T) => string | number | null): SQL => sql`${sql.param(rows.map(value))}`;

/** A timestamp as a parameter for a `timestamptz` column. */
export const iso = (date: Date | null | undefined): string | null => (date ? date.toISOString() : null);
