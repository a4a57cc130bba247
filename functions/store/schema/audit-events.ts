import { index, jsonb, pgTable, text, timestamp } from 'drizzle-orm/pg-core';

/** Who did what to which object; written in the same transaction as the change. Never holds secrets. */
export const auditEvents = pgTable(
  'audit_events',
  {
    id: text('id').primaryKey(),
    workspaceId: text('workspace_id').notNull(),
    actor: text('actor').notNull(),
    action: text('action').notNull(),
    target: text('target').notNull(),
    details: jsonb('details').$type<Record<string, unknown>>().notNull().default({}),
    at: timestamp('at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [index('audit_events_workspace_at').on(t.workspaceId, t.at)],
);
