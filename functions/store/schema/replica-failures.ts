import { index, pgTable, text, timestamp } from 'drizzle-orm/pg-core';
import { deployments } from './deployments.js';
import { machines } from './machines.js';

/**
 * A replica that failed for good on a machine (its runtime used up its restarts): the controller placed it
 * elsewhere, and the scheduler keeps the deployment off that machine until an operator clears the mark.
 */
export const replicaFailures = pgTable(
  'replica_failures',
  {
    id: text('id').primaryKey(),
    deploymentId: text('deployment_id')
      .notNull()
      .references(() => deployments.id),
    machineId: text('machine_id')
      .notNull()
      .references(() => machines.id),
    assignmentId: text('assignment_id').notNull(),
    reason: text('reason').notNull(),
    failedAt: timestamp('failed_at', { withTimezone: true }).notNull().defaultNow(),
    clearedAt: timestamp('cleared_at', { withTimezone: true }),
  },
  (t) => [index('replica_failures_open').on(t.machineId, t.deploymentId)],
);
