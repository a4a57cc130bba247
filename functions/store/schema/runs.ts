import { sql } from 'drizzle-orm';
import { index, integer, jsonb, pgTable, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core';
import type { RunSpec } from '../../../shared/contracts/run.js';
import { workspaces } from './workspaces.js';

/**
 * A run (docs/runs.md): its spec as submitted, where it stands, and why while it waits. Live until it ends
 * (`finishedAt`): a name is unique among a workspace's live runs.
 */
export const runs = pgTable(
  'runs',
  {
    id: text('id').primaryKey(),
    workspaceId: text('workspace_id')
      .notNull()
      .references(() => workspaces.id),
    name: text('name').notNull(),
    spec: jsonb('spec').$type<RunSpec>().notNull(),
    /** A `RunState` (functions/core/runs/states.ts). */
    state: text('state').notNull().default('pending'),
    priority: integer('priority').notNull(),
    /** Why it waits (the queue's reason), or why it ended. */
    reason: text('reason'),
    /** Its place in its workspace's queue while it waits (1: next); null otherwise. */
    position: integer('position'),
    /** Restarts of the whole run (`restart-run`, a gang's), counted against its failure policy. */
    restarts: integer('restarts').notNull().default(0),
    /** Not placed before then: the back-off of a restart. */
    notBefore: timestamp('not_before', { withTimezone: true }),
    /** Since when it waits, for aging: its submission, or its return to the queue after a restart. */
    waitingSince: timestamp('waiting_since', { withTimezone: true }).notNull().defaultNow(),
    /** When its workers were last placed: a gang's barrier times out from it. */
    admittedAt: timestamp('admitted_at', { withTimezone: true }),
    submittedAt: timestamp('submitted_at', { withTimezone: true }).notNull().defaultNow(),
    startedAt: timestamp('started_at', { withTimezone: true }),
    finishedAt: timestamp('finished_at', { withTimezone: true }),
    /**
     * The job whose runner this run is (the `agent` backend, docs/jobs.md): its worker is given the job's variables
     * and asks for the runner's token when it starts. Null for a run submitted as such.
     */
    jobId: text('job_id'),
  },
  (t) => [
    uniqueIndex('runs_live_name').on(t.workspaceId, t.name).where(sql`${t.finishedAt} is null`),
    index('runs_workspace_submitted').on(t.workspaceId, t.submittedAt, t.id),
  ],
);
