import { index, integer, jsonb, pgTable, text, timestamp } from 'drizzle-orm/pg-core';
import type { Assignment } from '../../../shared/contracts/desired.js';
import { deployments } from './deployments.js';
import { machines } from './machines.js';

/** One replica of a deployment placed on one machine; `removedAt` set once it leaves desired state. */
export const assignments = pgTable(
  'assignments',
  {
    id: text('id').primaryKey(),
    machineId: text('machine_id')
      .notNull()
      .references(() => machines.id),
    deploymentId: text('deployment_id')
      .notNull()
      .references(() => deployments.id),
    spec: jsonb('spec').$type<Assignment>().notNull(),
    /**
     * The machine's desired generation that first carried this spec: a runtime report under an older one
     * predates it, so routing waits for a report at or after it (other assignments of the machine are unaffected).
     */
    sinceGen: integer('since_gen').notNull().default(0),
    /** `stable`, or `canary` for a replica of the deployment's canary version: each set is reconciled on its own. */
    track: text('track').$type<'stable' | 'canary'>().notNull().default('stable'),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    removedAt: timestamp('removed_at', { withTimezone: true }),
  },
  (t) => [index('assignments_machine').on(t.machineId)],
);
