import { sql } from 'drizzle-orm';
import { index, integer, pgTable, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core';

/**
 * One canonical workload (an inference request). Durable so that a token's Idempotency-Key never executes
 * twice, across instances and restarts. Holds no payload.
 */
export const workloads = pgTable(
  'workloads',
  {
    id: text('id').primaryKey(),
    workspaceId: text('workspace_id').notNull(),
    deploymentId: text('deployment_id').notNull(),
    kind: text('kind').notNull(),
    idempotencyKey: text('idempotency_key'),
    /** accepted | running | succeeded | failed | cancelled */
    state: text('state').notNull(),
    instanceId: text('instance_id').notNull(),
    machineId: text('machine_id'),
    attempts: integer('attempts').notNull().default(0),
    statusCode: integer('status_code'),
    errorCode: text('error_code'),
    deadline: timestamp('deadline', { withTimezone: true }).notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    finishedAt: timestamp('finished_at', { withTimezone: true }),
    /** The API token that asked: usage per token. */
    tokenId: text('token_id'),
    /** The model name the client asked for (the deployment's served name). */
    model: text('model'),
    /** From the runtime's `usage` when it sent one; null when unknown. */
    promptTokens: integer('prompt_tokens'),
    /** From the runtime's `usage`, else the agent's count of streamed events. */
    completionTokens: integer('completion_tokens'),
    /** Time to the first byte of the answer, measured by the control plane. */
    firstByteMs: integer('first_byte_ms'),
    /** The deployment's data class when it ran (its payload kept per the class's retention: never, today). */
    dataClass: text('data_class'),
    /** The registry version that answered (`mv_...`), and whether as the canary. */
    versionId: text('version_id'),
    track: text('track'),
  },
  (t) => [
    // An Idempotency-Key is scoped to the token and the key (docs/design.md section 5), never the workspace: another
    // token of the workspace could otherwise claim a key first, or learn the workload and state of one it reused.
    uniqueIndex('workloads_token_idempotency').on(t.tokenId, t.idempotencyKey).where(sql`${t.idempotencyKey} is not null`),
    index('workloads_state').on(t.state),
    index('workloads_workspace_created').on(t.workspaceId, t.createdAt),
    // Scale to zero asks when a deployment last had a request.
    index('workloads_deployment_created').on(t.deploymentId, t.createdAt),
    // Retention deletes the oldest first, in batches (`sweepExpiredWorkloads`).
    index('workloads_created').on(t.createdAt),
  ],
);
