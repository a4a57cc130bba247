import { integer, pgTable, primaryKey, text, timestamp } from 'drizzle-orm/pg-core';
import { workspaces } from './workspaces.js';
import { workspaceMembers } from './workspace-members.js';

export const apiTokens = pgTable('api_tokens', {
  id: text('id').primaryKey(),
  workspaceId: text('workspace_id')
    .notNull()
    .references(() => workspaces.id),
  name: text('name').notNull(),
  role: text('role', { enum: ['viewer', 'operator', 'admin', 'inference'] }).notNull(),
  /** SHA-256 of the secret; the secret itself is shown once and never stored. */
  tokenHash: text('token_hash').notNull().unique(),
  /** The member the token was issued to; its role never exceeds theirs. Null for the bootstrap token. */
  memberId: text('member_id').references(() => workspaceMembers.id),
  /** Inference tokens: the model names they may call; null allows every model of the workspace. */
  models: text('models').array(),
  /** Inference tokens: requests per minute across every instance; null is unlimited. */
  rateLimitPerMinute: integer('rate_limit_per_minute'),
  /** Who created it (`tok_...` or `system`). */
  createdBy: text('created_by').notNull().default('system'),
  createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  expiresAt: timestamp('expires_at', { withTimezone: true }),
  revokedAt: timestamp('revoked_at', { withTimezone: true }),
});

/**
 * Requests counted per rate-limited token and minute, shared by every instance (one upsert per request, only for
 * tokens that have a limit). `token_id` is the key counted: a token's id for its `/v1` requests, `api:<id>` for its
 * management requests, `denied:<JSON>` for its refused management requests of one route (services/access-denials.ts).
 * The controller deletes windows older than a few minutes.
 */
export const tokenRateWindows = pgTable(
  'token_rate_windows',
  {
    tokenId: text('token_id').notNull(),
    windowStart: timestamp('window_start', { withTimezone: true }).notNull(),
    count: integer('count').notNull().default(0),
  },
  (t) => [primaryKey({ columns: [t.tokenId, t.windowStart] })],
);
