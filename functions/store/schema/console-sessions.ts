import { pgTable, text, timestamp } from 'drizzle-orm/pg-core';
import { apiTokens } from './api-tokens.js';

/**
 * A console sign-in: the cookie carries the session's secret, only its hash is kept. A session lives no longer
 * than the API token it was opened with; revoking that token ends it.
 */
export const consoleSessions = pgTable('console_sessions', {
  id: text('id').primaryKey(),
  secretHash: text('secret_hash').notNull().unique(),
  tokenId: text('token_id')
    .notNull()
    .references(() => apiTokens.id),
  createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  expiresAt: timestamp('expires_at', { withTimezone: true }).notNull(),
  endedAt: timestamp('ended_at', { withTimezone: true }),
});
