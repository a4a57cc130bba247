import { sql } from 'drizzle-orm';
import { boolean, integer, jsonb, pgTable, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core';
import type { Inventory } from '../../../shared/contracts/inventory.js';
import type { GpuSample } from '../../../shared/contracts/telemetry.js';
import { workspaces } from './workspaces.js';

export const machines = pgTable(
  'machines',
  {
    id: text('id').primaryKey(),
    workspaceId: text('workspace_id')
      .notNull()
      .references(() => workspaces.id),
    name: text('name').notNull(),
    labels: jsonb('labels').$type<Record<string, string>>().notNull().default({}),
    inventory: jsonb('inventory').$type<Inventory>().notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    revokedAt: timestamp('revoked_at', { withTimezone: true }),
    cordoned: boolean('cordoned').notNull().default(false),
    draining: boolean('draining').notNull().default(false),
    /** Lent to the fleet's run queue: runs of every workspace may place workers on it (docs/runs.md). */
    shared: boolean('shared').notNull().default(false),
    lastHeartbeatAt: timestamp('last_heartbeat_at', { withTimezone: true }),
    bootId: text('boot_id'),
    lastSeq: integer('last_seq'),
    reportedStatus: text('reported_status'),
    reportedGen: integer('reported_gen'),
    /** Models the agent last reported loaded in a ready runtime. */
    warmModels: jsonb('warm_models').$type<string[]>().notNull().default([]),
    /** Model versions the agent last reported verified in its cache. */
    cachedVersions: jsonb('cached_versions').$type<string[]>().notNull().default([]),
    /** The address other machines of its site reach it at, as its agent last reported (a run's MASTER_ADDR). */
    address: text('address'),
    metrics: jsonb('metrics').$type<Record<string, number>>().notNull().default({}),
    /** Its GPUs as its agent last sampled them (docs/telemetry.md). */
    gpus: jsonb('gpus').$type<GpuSample[]>().notNull().default([]),
    /** When its last telemetry sample was kept (`telemetry_samples`): at most one per `telemetrySampleMs`. */
    telemetryAt: timestamp('telemetry_at', { withTimezone: true }),
    /** Bumped on every change of the machine's assignments or run workers; the signed desired state carries it. */
    desiredGen: integer('desired_gen').notNull().default(0),
    /** Latest expiry of a desired state signed for `desiredGen`: routing needs it in the future. */
    desiredExpiresAt: timestamp('desired_expires_at', { withTimezone: true }),
  },
  (t) => [uniqueIndex('machines_live_name').on(t.workspaceId, t.name).where(sql`${t.revokedAt} is null`)],
);
