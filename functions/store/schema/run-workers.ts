import { sql } from 'drizzle-orm';
import { index, integer, jsonb, pgTable, text, timestamp } from 'drizzle-orm/pg-core';
import type { TemplateRuntime } from '../../../shared/contracts/desired.js';
import { machines } from './machines.js';
import { runs } from './runs.js';

/** What one worker reserves on its machine, as `WorkerAssignment.resources` carries it. */
export interface WorkerResources {
  gpus: number;
  cores: number;
  memoryMiB: number;
}

/**
 * One worker of a run, made with the run. It reserves `resources` on `machineId` from its placement (`placedAt`)
 * until released (`releasedAt`): replicas and workers share one reservation accounting (controller/recheck.ts).
 */
export const runWorkers = pgTable(
  'run_workers',
  {
    id: text('id').primaryKey(),
    runId: text('run_id')
      .notNull()
      .references(() => runs.id),
    rank: integer('rank').notNull(),
    /** Its group's name; null in a run without groups. */
    group: text('group'),
    name: text('name').notNull(),
    resources: jsonb('resources').$type<WorkerResources>().notNull(),
    /** Where it is placed; null while its run waits. */
    machineId: text('machine_id').references(() => machines.id),
    placedAt: timestamp('placed_at', { withTimezone: true }),
    releasedAt: timestamp('released_at', { withTimezone: true }),
    /** The process its machine runs, resolved from the run's template at placement, its env included. */
    command: jsonb('command').$type<TemplateRuntime>(),
    /** Bumped by each restart: the agent stops the old process and starts a new one. */
    attempt: integer('attempt').notNull().default(0),
    /** Restarts of this worker alone (`restart-worker`). */
    restarts: integer('restarts').notNull().default(0),
    /** A `RunState`. */
    state: text('state').notNull().default('pending'),
    exitCode: integer('exit_code'),
    message: text('message'),
    /** `prepare` (a gang assembling) or `start`. */
    phase: text('phase').$type<'prepare' | 'start'>().notNull().default('prepare'),
    /** A failed worker the failure policy restarts waits until then; null otherwise. */
    restartAt: timestamp('restart_at', { withTimezone: true }),
  },
  (t) => [index('run_workers_run').on(t.runId, t.rank), index('run_workers_machine').on(t.machineId).where(sql`${t.releasedAt} is null`)],
);
