import { index, integer, jsonb, pgTable, primaryKey, text, timestamp } from 'drizzle-orm/pg-core';
import type { JobSpec } from '../../../shared/batch/job.js';

/**
 * A job: work run against the fleet's models by a runner process (docs/jobs.md). A batch of the OpenAI Batch API is
 * one. Its rows' results live in the artifact store (`job_parts`, then its output files), never in these rows; what
 * is kept here is where it stands: its checkpoint (the rows finished, as ranges), counts and times.
 */
export const jobs = pgTable(
  'jobs',
  {
    id: text('id').primaryKey(),
    workspaceId: text('workspace_id').notNull(),
    spec: jsonb('spec').$type<JobSpec>().notNull(),
    /** A `JobState`. */
    state: text('state').notNull().default('pending'),
    /** Bumped by each start of its runner: a report of an earlier attempt is refused. */
    attempt: integer('attempt').notNull().default(0),
    /** The API token its current runner holds (revoked when the attempt ends); null between attempts. */
    runnerTokenId: text('runner_token_id'),
    /** The rows finished, as sorted disjoint ranges of row indices (`RowRanges`). */
    done: jsonb('done').$type<Array<[number, number]>>().notNull().default([]),
    /** Rows in its input, once its runner has read to the end; null before. */
    totalRows: integer('total_rows'),
    doneRows: integer('done_rows').notNull().default(0),
    failedRows: integer('failed_rows').notNull().default(0),
    /** Recent `{at, done}` samples for the rate and ETA (`shared/batch/progress.ts`), newest last, bounded. */
    samples: jsonb('samples').$type<Array<{ at: number; done: number }>>().notNull().default([]),
    parts: integer('parts').notNull().default(0),
    outputFileId: text('output_file_id'),
    errorFileId: text('error_file_id'),
    metadata: jsonb('metadata').$type<Record<string, string> | null>(),
    /** The final state its finalizing reaches (a `JobOutcome`); null before it ends. */
    outcome: text('outcome'),
    /** Why it ended so (`cancelled`, `expired`, its runner's failure); null while it runs or once it completed. */
    reason: text('reason'),
    /** The control-plane instance whose local backend runs it now, and until when it holds it. */
    leaseInstanceId: text('lease_instance_id'),
    leaseExpiresAt: timestamp('lease_expires_at', { withTimezone: true }),
    /**
     * What its backend calls the current attempt's runner (docs/jobs.md, "Backends"): a Slurm job id, the run whose
     * worker runs it on a node; null for the `local` backend (its runners live in the instance's memory) and between
     * attempts.
     */
    handle: text('handle'),
    /**
     * Days its files are kept, from the data class of the deployment its model names when it was submitted
     * (`filesDays` of the workspace's policy); null: until deleted.
     */
    filesDays: integer('files_days'),
    /** The swarm it was submitted to (its endpoint and model); null for a job of no swarm. */
    swarmId: text('swarm_id'),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    startedAt: timestamp('started_at', { withTimezone: true }),
    finalizingAt: timestamp('finalizing_at', { withTimezone: true }),
    cancellingAt: timestamp('cancelling_at', { withTimezone: true }),
    finishedAt: timestamp('finished_at', { withTimezone: true }),
    expiresAt: timestamp('expires_at', { withTimezone: true }),
  },
  (t) => [index('jobs_workspace').on(t.workspaceId, t.id), index('jobs_live').on(t.state), index('jobs_swarm').on(t.swarmId)],
);

/**
 * One checkpoint of a job's runner: the results of some rows, written to the artifact store sorted by row index,
 * before the rows count as done. Finalizing merges the parts in row order into the job's output.
 */
export const jobParts = pgTable(
  'job_parts',
  {
    jobId: text('job_id').notNull(),
    seq: integer('seq').notNull(),
    objectKey: text('object_key').notNull(),
    rows: integer('rows').notNull(),
    failedRows: integer('failed_rows').notNull(),
    firstRow: integer('first_row').notNull(),
    lastRow: integer('last_row').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.jobId, t.seq] })],
);
