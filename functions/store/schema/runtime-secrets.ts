import { jsonb, pgTable, primaryKey, text, timestamp } from 'drizzle-orm/pg-core';
import type { SecretFeed } from '../../../shared/contracts/runtime-template.js';
import { workspaces } from './workspaces.js';

/**
 * Runtime secrets (tokens a runtime needs, e.g. HF_TOKEN), sealed with AES-256-GCM under the control plane's
 * secret key, which is never stored here (functions/core/registry/secret-box.ts).
 */
export const runtimeSecrets = pgTable(
  'runtime_secrets',
  {
    workspaceId: text('workspace_id')
      .notNull()
      .references(() => workspaces.id),
    name: text('name').notNull(),
    /** `v1.<iv>.<tag>.<ciphertext>`, bound to workspace and name. */
    sealed: text('sealed').notNull(),
    /** Which key sealed it (a digest of the key): names the mismatch when another key is configured. */
    keyId: text('key_id').notNull(),
    /** Changes with the value: the replicas using the secret roll on it; never derived from the value. */
    version: text('version').notNull(),
    /**
     * The (template, env name) pairs the secret may feed, set by the admin who writes it: a deployment naming it
     * anywhere else is refused (and one already doing so no longer renders). Empty (what rows written before
     * migration 0012 got): it feeds nothing.
     */
    feeds: jsonb('feeds').$type<SecretFeed[]>().notNull().default([]),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.workspaceId, t.name] })],
);
