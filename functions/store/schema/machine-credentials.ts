import { index, jsonb, pgTable, text, timestamp } from 'drizzle-orm/pg-core';
import type { Ed25519PublicJwk } from '../../../shared/contracts/enrollment.js';
import { machines } from './machines.js';

/** A machine's public keys; several overlap during rotation, each valid until its own expiry. */
export const machineCredentials = pgTable(
  'machine_credentials',
  {
    id: text('id').primaryKey(),
    machineId: text('machine_id')
      .notNull()
      .references(() => machines.id),
    publicKey: jsonb('public_key').$type<Ed25519PublicJwk>().notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    expiresAt: timestamp('expires_at', { withTimezone: true }).notNull(),
  },
  (t) => [index('machine_credentials_machine').on(t.machineId)],
);
