import { jsonb, pgTable, text, timestamp } from 'drizzle-orm/pg-core';

/** Cluster-wide singletons: the cluster id, the controller's last tick (for interruption grace). */
export const clusterSettings = pgTable('cluster_settings', {
  key: text('key').primaryKey(),
  value: jsonb('value').$type<unknown>().notNull(),
  updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
});
