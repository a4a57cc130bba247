import { pgTable, text, timestamp } from 'drizzle-orm/pg-core';

/**
 * Controlled temporary storage for a payload that must cross instances (the client on one, the node's
 * stream on another). Deleted on pickup or at its deadline, whichever comes first, with a receipt.
 */
export const invocationPayloads = pgTable('invocation_payloads', {
  invocationId: text('invocation_id').primaryKey(),
  machineId: text('machine_id').notNull(),
  invoke: text('invoke').notNull(),
  expiresAt: timestamp('expires_at', { withTimezone: true }).notNull(),
});

/** Proof that a stored payload was deleted, and why (`pickup` or `deadline`). */
export const payloadReceipts = pgTable('payload_receipts', {
  invocationId: text('invocation_id').primaryKey(),
  reason: text('reason').notNull(),
  deletedAt: timestamp('deleted_at', { withTimezone: true }).notNull().defaultNow(),
});
