import { boolean, index, pgTable, text, timestamp } from 'drizzle-orm/pg-core';
import { modelVersions } from './model-versions.js';

/**
 * Every move of an alias: who moved it, from which version to which, and why. A rollback
 * walks this history back one step (functions/core/registry/alias-history.ts).
 */
export const modelAliasMoves = pgTable(
  'model_alias_moves',
  {
    id: text('id').primaryKey(),
    workspaceId: text('workspace_id').notNull(),
    alias: text('alias').notNull(),
    /** Null for the move that created the alias. */
    fromVersionId: text('from_version_id').references(() => modelVersions.id),
    toVersionId: text('to_version_id')
      .notNull()
      .references(() => modelVersions.id),
    rollback: boolean('rollback').notNull().default(false),
    by: text('by').notNull(),
    reason: text('reason').notNull(),
    at: timestamp('at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [index('model_alias_moves_alias').on(t.workspaceId, t.alias, t.at)],
);
