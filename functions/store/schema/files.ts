import { sql } from 'drizzle-orm';
import { bigint, index, pgTable, text, timestamp } from 'drizzle-orm/pg-core';
import type { FilePurpose } from '../../../shared/contracts/openai-files.js';
import { workspaces } from './workspaces.js';

/**
 * A file of the OpenAI Files API (docs/files.md): what it is, never its bytes, which are the artifact store's object
 * at `objectKey` (`_data/<workspace id>/files/<file id>`). A row is written only once the object is whole; a deleted
 * file keeps its row (`deletedAt`) and loses its object.
 */
export const files = pgTable(
  'files',
  {
    id: text('id').primaryKey(),
    workspaceId: text('workspace_id')
      .notNull()
      .references(() => workspaces.id),
    filename: text('filename').notNull(),
    purpose: text('purpose').$type<FilePurpose>().notNull(),
    bytes: bigint('bytes', { mode: 'number' }).notNull(),
    /** SHA-256 (hex) of the bytes, measured as they were stored. */
    sha256: text('sha256').notNull(),
    objectKey: text('object_key').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    /** Null: kept until deleted. */
    expiresAt: timestamp('expires_at', { withTimezone: true }),
    deletedAt: timestamp('deleted_at', { withTimezone: true }),
  },
  // Lists page by id (time-ordered) among a workspace's live files.
  (t) => [index('files_workspace_live').on(t.workspaceId, t.id).where(sql`${t.deletedAt} is null`)],
);
