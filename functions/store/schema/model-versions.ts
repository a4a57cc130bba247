import { bigint, jsonb, pgTable, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core';
import type { Manifest, ModelFormat, Provenance, Verification, VersionState } from '../../../shared/contracts/registry.js';
import { models } from './models.js';
import { workspaces } from './workspaces.js';

/**
 * A version of a model: its files (manifest), the evidence gathered about it (licence, provenance, the digest
 * verification) and where it is in the lifecycle (functions/core/registry/lifecycle.ts), which only that core moves.
 */
export const modelVersions = pgTable(
  'model_versions',
  {
    id: text('id').primaryKey(),
    modelId: text('model_id')
      .notNull()
      .references(() => models.id),
    workspaceId: text('workspace_id')
      .notNull()
      .references(() => workspaces.id),
    version: text('version').notNull(),
    format: text('format').$type<ModelFormat>().notNull(),
    licence: text('licence'),
    provenance: jsonb('provenance').$type<Provenance>(),
    manifest: jsonb('manifest').$type<Manifest>().notNull(),
    fileCount: bigint('file_count', { mode: 'number' }).notNull(),
    totalBytes: bigint('total_bytes', { mode: 'number' }).notNull(),
    state: text('state').$type<VersionState>().notNull().default('candidate'),
    /** The last digest verification's evidence; a new one replaces it only while the version is `documented`. */
    verification: jsonb('verification').$type<Verification>(),
    /** The token that registered it. */
    createdBy: text('created_by').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [uniqueIndex('model_versions_label').on(t.modelId, t.version)],
);
