import { jsonb, pgTable, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core';
import type { SwarmConfig } from '../../../shared/contracts/swarm.js';
import { workspaces } from './workspaces.js';

/**
 * A swarm (docs/jobs.md, "Swarms"): a deployment and the jobs submitted to it (`jobs.swarm_id`), as one record that
 * outlives the process that brought it up. What it serves and how is its deployment's row; this keeps the config
 * that created it, for `up` to reconcile the deployment against and for a client to read back. `down` deletes the
 * row: a swarm brought up again under the same name is another swarm (another id), with none of the old one's jobs.
 */
export const swarms = pgTable(
  'swarms',
  {
    id: text('id').primaryKey(),
    workspaceId: text('workspace_id')
      .notNull()
      .references(() => workspaces.id),
    name: text('name').notNull(),
    /** Its deployment's name (the swarm's unless its config names another): one swarm a deployment. */
    deploymentName: text('deployment_name').notNull(),
    config: jsonb('config').$type<SwarmConfig>().notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [uniqueIndex('swarms_name').on(t.workspaceId, t.name), uniqueIndex('swarms_deployment').on(t.workspaceId, t.deploymentName)],
);
