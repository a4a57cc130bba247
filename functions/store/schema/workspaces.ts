import { integer, jsonb, pgTable, real, text, timestamp } from 'drizzle-orm/pg-core';
import { MAX_RUN_PRIORITY } from '../../../shared/contracts/run.js';
import type { WorkspacePolicy } from '../../../shared/contracts/placement.js';

export const workspaces = pgTable('workspaces', {
  id: text('id').primaryKey(),
  name: text('name').notNull().unique(),
  createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  /** Quota, data classes and licence rules (shared/contracts/placement.ts); `{}`: no quota, no class rules. */
  policy: jsonb('policy').$type<Partial<WorkspacePolicy>>().notNull().default({}),
  /** Its runs' fair-share weight (docs/runs.md): twice the weight, twice the GPU-seconds before queueing behind others. */
  runWeight: real('run_weight').notNull().default(1),
  /** The highest priority its runs may use: a higher one is capped at it. */
  runPriorityCeiling: integer('run_priority_ceiling').notNull().default(MAX_RUN_PRIORITY),
});
