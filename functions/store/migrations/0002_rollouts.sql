CREATE TABLE "deployment_events" (
	"id" text PRIMARY KEY NOT NULL,
	"workspace_id" text NOT NULL,
	"deployment_id" text NOT NULL,
	"type" text NOT NULL,
	"machine_id" text,
	"assignment_id" text,
	"message" text,
	"at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "machines" ADD COLUMN "warm_models" jsonb DEFAULT '[]'::jsonb NOT NULL;--> statement-breakpoint
ALTER TABLE "deployments" ADD COLUMN "startup" jsonb DEFAULT '{"timeoutMs":1800000,"probeIntervalMs":1000,"failureThreshold":3}'::jsonb NOT NULL;--> statement-breakpoint
ALTER TABLE "deployments" ADD COLUMN "rollout" jsonb DEFAULT '{"maxSurge":1,"maxUnavailable":0}'::jsonb NOT NULL;--> statement-breakpoint
ALTER TABLE "assignments" ADD COLUMN "since_gen" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "runtime_reports" ADD COLUMN "warm" boolean DEFAULT false NOT NULL;--> statement-breakpoint
ALTER TABLE "runtime_reports" ADD COLUMN "progress" jsonb;--> statement-breakpoint
CREATE INDEX "deployment_events_deployment" ON "deployment_events" USING btree ("deployment_id","id");