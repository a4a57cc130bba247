import { bigint, index, jsonb, pgTable, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core';

/**
 * Who did what to which object, and how it ended; written in the same transaction as the change. Never holds
 * secrets or payloads. Append-only (a trigger refuses UPDATE and DELETE) and hash-chained per workspace: `hash`
 * covers the row's fields and `prevHash`, so an edited, removed or inserted row breaks the chain
 * (`shared/audit-chain.ts`). Rows written before the chain existed carry `hash` 'legacy'.
 */
export const auditEvents = pgTable(
  'audit_events',
  {
    id: text('id').primaryKey(),
    workspaceId: text('workspace_id').notNull(),
    /** 1, 2, 3... within the workspace: the chain's order. */
    seq: bigint('seq', { mode: 'number' }).notNull(),
    actor: text('actor').notNull(),
    action: text('action').notNull(),
    target: text('target').notNull(),
    /** succeeded | denied | failed */
    outcome: text('outcome').notNull().default('succeeded'),
    details: jsonb('details').$type<Record<string, unknown>>().notNull().default({}),
    at: timestamp('at', { withTimezone: true }).notNull().defaultNow(),
    prevHash: text('prev_hash').notNull().default(''),
    hash: text('hash').notNull().default('legacy'),
  },
  (t) => [index('audit_events_workspace_at').on(t.workspaceId, t.at), uniqueIndex('audit_events_chain').on(t.workspaceId, t.seq)],
);
