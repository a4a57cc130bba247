import { index, pgTable, text, timestamp } from 'drizzle-orm/pg-core';

/**
 * What happened to a deployment's replicas (placed, started, ready, failed, drained, retired), newest last;
 * bounded per deployment. Operator-facing facts only: never payloads.
 */
export const deploymentEvents = pgTable(
  'deployment_events',
  {
    id: text('id').primaryKey(),
    workspaceId: text('workspace_id').notNull(),
    deploymentId: text('deployment_id').notNull(),
    type: text('type').notNull(),
    machineId: text('machine_id'),
    assignmentId: text('assignment_id'),
    message: text('message'),
    at: timestamp('at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [index('deployment_events_deployment').on(t.deploymentId, t.id)],
);
