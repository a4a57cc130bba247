import { index, jsonb, pgTable, primaryKey, text, timestamp } from 'drizzle-orm/pg-core';
import type { EngineSample, GpuSample } from '../../../shared/contracts/telemetry.js';

/** A runtime as one telemetry sample keeps it: what the autoscaler and a deployment's charts read. */
export interface SampledRuntime {
  assignmentId: string;
  deploymentId: string;
  state: string;
  activeInvocations: number;
  queueDepth: number;
  engine: EngineSample | null;
}

/**
 * A machine's recent history (docs/telemetry.md): one row per machine at most every `telemetrySampleMs`, taken
 * from its heartbeats, deleted past `telemetryRetentionHours` by the controller tick. Rows grow with machines x
 * retention / interval: a larger fleet keeps fewer by a longer interval.
 */
export const telemetrySamples = pgTable(
  'telemetry_samples',
  {
    machineId: text('machine_id').notNull(),
    workspaceId: text('workspace_id').notNull(),
    at: timestamp('at', { withTimezone: true }).notNull(),
    gpus: jsonb('gpus').$type<GpuSample[]>().notNull(),
    runtimes: jsonb('runtimes').$type<SampledRuntime[]>().notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.machineId, t.at] }),
    index('telemetry_samples_workspace_at').on(t.workspaceId, t.at),
    index('telemetry_samples_at').on(t.at),
  ],
);
