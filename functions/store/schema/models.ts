import { sql } from 'drizzle-orm';
import { pgTable, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core';
import { workspaces } from './workspaces.js';

/** A model of the registry (docs/registry.md): a name whose versions go through the lifecycle. */
export const models = pgTable(
  'models',
  {
    id: text('id').primaryKey(),
    workspaceId: text('workspace_id')
      .notNull()
      .references(() => workspaces.id),
    name: text('name').notNull(),
    description: text('description'),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    /** A deleted model frees its name; its versions stay, as the evidence of what served. */
    deletedAt: timestamp('deleted_at', { withTimezone: true }),
  },
  (t) => [uniqueIndex('models_live_name').on(t.workspaceId, t.name).where(sql`${t.deletedAt} is null`)],
);
