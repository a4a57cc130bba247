CREATE TABLE "benchmark_runs" (
	"id" text PRIMARY KEY NOT NULL,
	"workspace_id" text NOT NULL,
	"version_id" text NOT NULL,
	"deployment_id" text NOT NULL,
	"profile" text NOT NULL,
	"evidence_version" integer NOT NULL,
	"evidence" jsonb NOT NULL,
	"passed" boolean NOT NULL,
	"created_by" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "workspaces" ADD COLUMN "policy" jsonb DEFAULT '{}'::jsonb NOT NULL;--> statement-breakpoint
ALTER TABLE "machines" ADD COLUMN "cached_versions" jsonb DEFAULT '[]'::jsonb NOT NULL;--> statement-breakpoint
ALTER TABLE "deployments" ADD COLUMN "source" jsonb;--> statement-breakpoint
ALTER TABLE "deployments" ADD COLUMN "canary" jsonb;--> statement-breakpoint
ALTER TABLE "deployments" ADD COLUMN "gpu_memory_mib" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "deployments" ADD COLUMN "data_class" text;--> statement-breakpoint
ALTER TABLE "deployments" ADD COLUMN "scale_to_zero" jsonb;--> statement-breakpoint
ALTER TABLE "deployments" ADD COLUMN "asleep_since" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "deployments" ADD COLUMN "woken_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "assignments" ADD COLUMN "track" text DEFAULT 'stable' NOT NULL;--> statement-breakpoint
ALTER TABLE "workloads" ADD COLUMN "data_class" text;--> statement-breakpoint
ALTER TABLE "workloads" ADD COLUMN "version_id" text;--> statement-breakpoint
ALTER TABLE "workloads" ADD COLUMN "track" text;--> statement-breakpoint
ALTER TABLE "benchmark_runs" ADD CONSTRAINT "benchmark_runs_workspace_id_workspaces_id_fk" FOREIGN KEY ("workspace_id") REFERENCES "public"."workspaces"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "benchmark_runs" ADD CONSTRAINT "benchmark_runs_version_id_model_versions_id_fk" FOREIGN KEY ("version_id") REFERENCES "public"."model_versions"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "benchmark_runs" ADD CONSTRAINT "benchmark_runs_deployment_id_deployments_id_fk" FOREIGN KEY ("deployment_id") REFERENCES "public"."deployments"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "benchmark_runs_version" ON "benchmark_runs" USING btree ("version_id","created_at");--> statement-breakpoint
CREATE INDEX "workloads_deployment_created" ON "workloads" USING btree ("deployment_id","created_at");