import { jsonb, pgTable, text, timestamp } from 'drizzle-orm/pg-core';
import type { WorkspacePolicy } from '../../../shared/contracts/placement.js';

export const workspaces = pgTable('workspaces', {
  id: text('id').primaryKey(),
  name: text('name').notNull().unique(),
  createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  /** Quota, data classes and licence rules (shared/contracts/placement.ts); `{}`: no quota, no class rules. */
  policy: jsonb('policy').$type<Partial<WorkspacePolicy>>().notNull().default({}),
});
