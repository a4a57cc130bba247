import { sql } from 'drizzle-orm';
import { integer, jsonb, pgTable, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core';
import type { ArtifactPin, RestartPolicy, StartupSpec } from '../../../shared/contracts/desired.js';
import type { CanarySpec, DeploymentRuntime, ModelSource, RolloutSpec, ScaleToZero } from '../../../shared/contracts/deployment.js';
import { workspaces } from './workspaces.js';
import type { AutoscaleSpec, AutoscalerMemory } from '../../../shared/contracts/autoscale.js';

export const deployments = pgTable(
  'deployments',
  {
    id: text('id').primaryKey(),
    workspaceId: text('workspace_id')
      .notNull()
      .references(() => workspaces.id),
    name: text('name').notNull(),
    model: text('model').notNull(),
    /** The template and its params as the operator gave them; the controller resolves them into each assignment. */
    runtime: jsonb('runtime').$type<DeploymentRuntime>().notNull(),
    artifact: jsonb('artifact').$type<ArtifactPin | null>(),
    restartPolicy: jsonb('restart_policy').$type<RestartPolicy>().notNull(),
    replicas: integer('replicas').notNull(),
    /** Machines must carry every one of these labels. */
    selector: jsonb('selector').$type<Record<string, string>>().notNull().default({}),
    /** The registry alias or version it serves; null for a deployment that pins its own artifact. */
    source: jsonb('source').$type<ModelSource | null>(),
    canary: jsonb('canary').$type<CanarySpec | null>(),
    gpus: integer('gpus').notNull().default(0),
    gpuMemoryMiB: integer('gpu_memory_mib').notNull().default(0),
    /** At most this many replicas of one set on one machine (resources allowing). */
    replicasPerMachine: integer('replicas_per_machine').notNull().default(1),
    memoryMiB: integer('memory_mib').notNull().default(0),
    dataClass: text('data_class'),
    scaleToZero: jsonb('scale_to_zero').$type<ScaleToZero | null>(),
    /** Set while scaled to zero (its replicas stopped after `scaleToZero.idleSeconds` idle); a request clears it. */
    asleepSince: timestamp('asleep_since', { withTimezone: true }),
    /** Its autoscaling policy; null: `replicas` is its count. */
    autoscale: jsonb('autoscale').$type<AutoscaleSpec | null>(),
    /** What the autoscaler carries from one controller pass to the next, and its latest decision. */
    autoscaleState: jsonb('autoscale_state').$type<AutoscalerMemory | null>(),
    /** When a request last woke it: idleness counts from the later of this and its last request. */
    wokenAt: timestamp('woken_at', { withTimezone: true }),
    /** Concurrent invocations one replica runs; more wait in its queue under their deadline. */
    maxConcurrency: integer('max_concurrency').notNull().default(16),
    /** Admission bound on queued + running invocations of the whole deployment; past it, 429. */
    queueCapacity: integer('queue_capacity').notNull().default(256),
    startup: jsonb('startup').$type<StartupSpec>().notNull().default({ timeoutMs: 1_800_000, probeIntervalMs: 1_000, failureThreshold: 3 }),
    rollout: jsonb('rollout').$type<RolloutSpec>().notNull().default({ maxSurge: 1, maxUnavailable: 0 }),
    generation: integer('generation').notNull().default(1),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
    deletedAt: timestamp('deleted_at', { withTimezone: true }),
  },
  (t) => [uniqueIndex('deployments_live_name').on(t.workspaceId, t.name).where(sql`${t.deletedAt} is null`)],
);
