CREATE TABLE "runs" (
	"id" text PRIMARY KEY NOT NULL,
	"workspace_id" text NOT NULL,
	"name" text NOT NULL,
	"spec" jsonb NOT NULL,
	"state" text DEFAULT 'pending' NOT NULL,
	"priority" integer NOT NULL,
	"reason" text,
	"position" integer,
	"restarts" integer DEFAULT 0 NOT NULL,
	"not_before" timestamp with time zone,
	"waiting_since" timestamp with time zone DEFAULT now() NOT NULL,
	"admitted_at" timestamp with time zone,
	"submitted_at" timestamp with time zone DEFAULT now() NOT NULL,
	"started_at" timestamp with time zone,
	"finished_at" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "run_workers" (
	"id" text PRIMARY KEY NOT NULL,
	"run_id" text NOT NULL,
	"rank" integer NOT NULL,
	"group" text,
	"name" text NOT NULL,
	"resources" jsonb NOT NULL,
	"machine_id" text,
	"placed_at" timestamp with time zone,
	"released_at" timestamp with time zone,
	"command" jsonb,
	"attempt" integer DEFAULT 0 NOT NULL,
	"restarts" integer DEFAULT 0 NOT NULL,
	"state" text DEFAULT 'pending' NOT NULL,
	"exit_code" integer,
	"message" text,
	"phase" text DEFAULT 'prepare' NOT NULL,
	"restart_at" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "run_events" (
	"id" text PRIMARY KEY NOT NULL,
	"seq" bigserial NOT NULL,
	"run_id" text NOT NULL,
	"worker_id" text,
	"from" text NOT NULL,
	"to" text NOT NULL,
	"reason" text NOT NULL,
	"origin" text NOT NULL,
	"at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "workspaces" ADD COLUMN "run_weight" real DEFAULT 1 NOT NULL;--> statement-breakpoint
ALTER TABLE "workspaces" ADD COLUMN "run_priority_ceiling" integer DEFAULT 1000 NOT NULL;--> statement-breakpoint
ALTER TABLE "machines" ADD COLUMN "address" text;--> statement-breakpoint
ALTER TABLE "runs" ADD CONSTRAINT "runs_workspace_id_workspaces_id_fk" FOREIGN KEY ("workspace_id") REFERENCES "public"."workspaces"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "run_workers" ADD CONSTRAINT "run_workers_run_id_runs_id_fk" FOREIGN KEY ("run_id") REFERENCES "public"."runs"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "run_workers" ADD CONSTRAINT "run_workers_machine_id_machines_id_fk" FOREIGN KEY ("machine_id") REFERENCES "public"."machines"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "runs_live_name" ON "runs" USING btree ("workspace_id","name") WHERE "runs"."finished_at" is null;--> statement-breakpoint
CREATE INDEX "runs_workspace_submitted" ON "runs" USING btree ("workspace_id","submitted_at","id");--> statement-breakpoint
CREATE INDEX "run_workers_run" ON "run_workers" USING btree ("run_id","rank");--> statement-breakpoint
CREATE INDEX "run_workers_machine" ON "run_workers" USING btree ("machine_id") WHERE "run_workers"."released_at" is null;--> statement-breakpoint
CREATE INDEX "run_events_run" ON "run_events" USING btree ("run_id","seq");