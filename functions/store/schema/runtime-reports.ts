import { boolean, integer, jsonb, pgTable, primaryKey, text, timestamp } from 'drizzle-orm/pg-core';
import type { StartupProgress } from '../../../shared/contracts/heartbeat.js';
import type { EngineSample } from '../../../shared/contracts/telemetry.js';
import { machines } from './machines.js';

/** The latest report of each runtime, written by heartbeats only. */
export const runtimeReports = pgTable(
  'runtime_reports',
  {
    machineId: text('machine_id')
      .notNull()
      .references(() => machines.id),
    assignmentId: text('assignment_id').notNull(),
    deploymentId: text('deployment_id').notNull(),
    state: text('state').notNull(),
    gen: integer('gen').notNull(),
    activeInvocations: integer('active_invocations').notNull().default(0),
    queueDepth: integer('queue_depth').notNull().default(0),
    warm: boolean('warm').notNull().default(false),
    progress: jsonb('progress').$type<StartupProgress | null>(),
    restarts: integer('restarts').notNull().default(0),
    message: text('message'),
    /** Its engine's metrics as the agent last read them; null when it has none (docs/telemetry.md). */
    engine: jsonb('engine').$type<EngineSample | null>(),
    reportedAt: timestamp('reported_at', { withTimezone: true }).notNull(),
  },
  (t) => [primaryKey({ columns: [t.machineId, t.assignmentId] })],
);
