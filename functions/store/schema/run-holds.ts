import { index, integer, pgTable, primaryKey, text, timestamp } from 'drizzle-orm/pg-core';

/**
 * A reservation of GPUs a run's worker held and gave back: from its placement to its release, written at the
 * release. The run queue's fair share sums them, with the workers' reservations still held, over its window
 * (docs/runs.md, "Fair share"); a worker placed again starts a new one. Kept for the window, then pruned.
 */
export const runHolds = pgTable(
  'run_holds',
  {
    workspaceId: text('workspace_id').notNull(),
    runId: text('run_id').notNull(),
    workerId: text('worker_id').notNull(),
    gpus: integer('gpus').notNull(),
    heldFrom: timestamp('held_from', { withTimezone: true }).notNull(),
    heldTo: timestamp('held_to', { withTimezone: true }).notNull(),
  },
  (t) => [primaryKey({ columns: [t.workerId, t.heldFrom] }), index('run_holds_to').on(t.heldTo)],
);
