import { sql } from 'drizzle-orm';
import { pgTable, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core';
import { workspaces } from './workspaces.js';

/**
 * A person (or team) in a workspace with the highest role their tokens may carry. Removing a member revokes
 * their tokens in the same transaction.
 */
export const workspaceMembers = pgTable(
  'workspace_members',
  {
    id: text('id').primaryKey(),
    workspaceId: text('workspace_id')
      .notNull()
      .references(() => workspaces.id),
    /** How operators name them: an e-mail address or a team name. */
    name: text('name').notNull(),
    role: text('role', { enum: ['viewer', 'operator', 'admin', 'inference'] }).notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    removedAt: timestamp('removed_at', { withTimezone: true }),
  },
  (t) => [uniqueIndex('workspace_members_name').on(t.workspaceId, t.name).where(sql`${t.removedAt} is null`)],
);
