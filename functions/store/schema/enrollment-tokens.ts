import { jsonb, pgTable, text, timestamp } from 'drizzle-orm/pg-core';
import { workspaces } from './workspaces.js';

export const enrollmentTokens = pgTable('enrollment_tokens', {
  id: text('id').primaryKey(),
  workspaceId: text('workspace_id')
    .notNull()
    .references(() => workspaces.id),
  tokenHash: text('token_hash').notNull().unique(),
  boundName: text('bound_name'),
  labels: jsonb('labels').$type<Record<string, string>>().notNull().default({}),
  createdBy: text('created_by').notNull(),
  createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  expiresAt: timestamp('expires_at', { withTimezone: true }).notNull(),
  usedAt: timestamp('used_at', { withTimezone: true }),
  machineId: text('machine_id'),
  /** An admin revoked it before it was used: it enrolls nothing from then on (DELETE /api/v1/enrollment-tokens/{id}). */
  revokedAt: timestamp('revoked_at', { withTimezone: true }),
});
