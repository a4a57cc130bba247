import { pgTable, primaryKey, text, timestamp } from 'drizzle-orm/pg-core';
import { modelVersions } from './model-versions.js';
import { workspaces } from './workspaces.js';

/** A name (`chat-default`) that points at an approved version; each move is in `model_alias_moves`. */
export const modelAliases = pgTable(
  'model_aliases',
  {
    workspaceId: text('workspace_id')
      .notNull()
      .references(() => workspaces.id),
    name: text('name').notNull(),
    versionId: text('version_id')
      .notNull()
      .references(() => modelVersions.id),
    updatedBy: text('updated_by').notNull(),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.workspaceId, t.name] })],
);
