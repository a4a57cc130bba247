import { jsonb, pgTable, primaryKey, text, timestamp } from 'drizzle-orm/pg-core';
import type { RuntimeTemplateSpec } from '../../../shared/contracts/runtime-template.js';
import { workspaces } from './workspaces.js';

/** Runtime templates an admin registered (functions/registry): what deployments may run, per workspace. */
export const runtimeTemplates = pgTable(
  'runtime_templates',
  {
    workspaceId: text('workspace_id')
      .notNull()
      .references(() => workspaces.id),
    name: text('name').notNull(),
    spec: jsonb('spec').$type<RuntimeTemplateSpec>().notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.workspaceId, t.name] })],
);
