-- An Idempotency-Key is scoped to the token and the key, no longer to the workspace (second security review, L1);
-- the old index guaranteed no token repeated a key, so the new one builds over any existing rows. Enrollment tokens
-- can be revoked (L9).
DROP INDEX "workloads_idempotency";--> statement-breakpoint
ALTER TABLE "enrollment_tokens" ADD COLUMN "revoked_at" timestamp with time zone;--> statement-breakpoint
CREATE UNIQUE INDEX "workloads_token_idempotency" ON "workloads" USING btree ("token_id","idempotency_key") WHERE "workloads"."idempotency_key" is not null;