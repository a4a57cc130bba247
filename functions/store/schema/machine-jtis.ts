import { index, pgTable, text, timestamp } from 'drizzle-orm/pg-core';

/** Replay fence: every accepted machine JWT id, kept until the JWT would have expired anyway. */
export const machineJtis = pgTable(
  'machine_jtis',
  {
    jti: text('jti').primaryKey(),
    machineId: text('machine_id').notNull(),
    expiresAt: timestamp('expires_at', { withTimezone: true }).notNull(),
  },
  (t) => [index('machine_jtis_expiry').on(t.expiresAt)],
);
