CREATE TABLE "workloads" (
	"id" text PRIMARY KEY NOT NULL,
	"workspace_id" text NOT NULL,
	"deployment_id" text NOT NULL,
	"kind" text NOT NULL,
	"idempotency_key" text,
	"state" text NOT NULL,
	"instance_id" text NOT NULL,
	"machine_id" text,
	"attempts" integer DEFAULT 0 NOT NULL,
	"status_code" integer,
	"error_code" text,
	"deadline" timestamp with time zone NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"finished_at" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "invocation_payloads" (
	"invocation_id" text PRIMARY KEY NOT NULL,
	"machine_id" text NOT NULL,
	"invoke" text NOT NULL,
	"expires_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
CREATE TABLE "payload_receipts" (
	"invocation_id" text PRIMARY KEY NOT NULL,
	"reason" text NOT NULL,
	"deleted_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "deployments" ADD COLUMN "max_concurrency" integer DEFAULT 16 NOT NULL;--> statement-breakpoint
ALTER TABLE "deployments" ADD COLUMN "queue_capacity" integer DEFAULT 256 NOT NULL;--> statement-breakpoint
CREATE UNIQUE INDEX "workloads_idempotency" ON "workloads" USING btree ("workspace_id","idempotency_key") WHERE "workloads"."idempotency_key" is not null;--> statement-breakpoint
CREATE INDEX "workloads_state" ON "workloads" USING btree ("state");