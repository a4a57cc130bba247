import { boolean, index, integer, jsonb, pgTable, text, timestamp } from 'drizzle-orm/pg-core';
import type { BenchmarkEvidence } from '../../../shared/contracts/benchmark.js';
import { deployments } from './deployments.js';
import { modelVersions } from './model-versions.js';
import { workspaces } from './workspaces.js';

/**
 * A benchmark gate run: a named workload profile sent to a deployment's canary through the data plane, and what
 * was measured. Evidence is never rewritten: a later run is another row; `evidenceVersion` is its format's.
 */
export const benchmarkRuns = pgTable(
  'benchmark_runs',
  {
    id: text('id').primaryKey(),
    workspaceId: text('workspace_id')
      .notNull()
      .references(() => workspaces.id),
    versionId: text('version_id')
      .notNull()
      .references(() => modelVersions.id),
    deploymentId: text('deployment_id')
      .notNull()
      .references(() => deployments.id),
    profile: text('profile').notNull(),
    evidenceVersion: integer('evidence_version').notNull(),
    evidence: jsonb('evidence').$type<BenchmarkEvidence>().notNull(),
    passed: boolean('passed').notNull(),
    createdBy: text('created_by').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [index('benchmark_runs_version').on(t.versionId, t.createdAt)],
);
