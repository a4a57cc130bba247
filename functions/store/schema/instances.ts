import { pgTable, text, timestamp } from 'drizzle-orm/pg-core';

/**
 * Control-plane instances and their own short lease (docs/design.md section 4): renewed while the instance
 * lives, so that the stream leases and workloads of an instance that died lapse within seconds.
 */
export const instances = pgTable('instances', {
  id: text('id').primaryKey(),
  startedAt: timestamp('started_at', { withTimezone: true }).notNull().defaultNow(),
  renewedAt: timestamp('renewed_at', { withTimezone: true }).notNull().defaultNow(),
  expiresAt: timestamp('expires_at', { withTimezone: true }).notNull(),
  /** Where the other instances reach this one's peer channel (its own listener, never the public port); null on Workers. */
  peerUrl: text('peer_url'),
});
