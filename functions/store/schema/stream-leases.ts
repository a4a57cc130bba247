import { pgTable, text, timestamp } from 'drizzle-orm/pg-core';
import { machines } from './machines.js';

/** Which control-plane instance holds a machine's stream; valid while `expiresAt` is in the future. */
export const streamLeases = pgTable('stream_leases', {
  machineId: text('machine_id')
    .primaryKey()
    .references(() => machines.id),
  instanceId: text('instance_id').notNull(),
  connectionId: text('connection_id').notNull(),
  attachedAt: timestamp('attached_at', { withTimezone: true }).notNull().defaultNow(),
  expiresAt: timestamp('expires_at', { withTimezone: true }).notNull(),
  /** When the agent last answered a ping on this stream: a frozen agent stops answering long before its lease lapses. */
  answeredAt: timestamp('answered_at', { withTimezone: true }),
});
