import { bigserial, index, pgTable, text, timestamp } from 'drizzle-orm/pg-core';

/** Every move of a run or of one of its workers, with why and who moved it (docs/runs.md, "States"), newest last. */
export const runEvents = pgTable(
  'run_events',
  {
    id: text('id').primaryKey(),
    /** The order they were written in: ids minted in one millisecond are not ordered. */
    seq: bigserial('seq', { mode: 'number' }).notNull(),
    runId: text('run_id').notNull(),
    /** Null for a move of the run itself. */
    workerId: text('worker_id'),
    from: text('from').notNull(),
    to: text('to').notNull(),
    reason: text('reason').notNull(),
    /** `agent`, `controller` or `workers` (a run following its workers). */
    origin: text('origin').notNull(),
    at: timestamp('at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [index('run_events_run').on(t.runId, t.seq)],
);
