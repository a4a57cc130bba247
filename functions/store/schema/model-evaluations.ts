import { boolean, index, jsonb, pgTable, text, timestamp } from 'drizzle-orm/pg-core';
import { modelVersions } from './model-versions.js';

/** One evaluation suite's run on a version, as the operator recorded it: a failed one rejects the version. */
export const modelEvaluations = pgTable(
  'model_evaluations',
  {
    id: text('id').primaryKey(),
    versionId: text('version_id')
      .notNull()
      .references(() => modelVersions.id),
    suite: text('suite').notNull(),
    passed: boolean('passed').notNull(),
    metrics: jsonb('metrics').$type<Record<string, number>>().notNull(),
    notes: text('notes'),
    recordedBy: text('recorded_by').notNull(),
    at: timestamp('at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [index('model_evaluations_version').on(t.versionId, t.id)],
);
