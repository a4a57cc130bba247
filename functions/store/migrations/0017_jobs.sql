CREATE TABLE "job_parts" (
	"job_id" text NOT NULL,
	"seq" integer NOT NULL,
	"object_key" text NOT NULL,
	"rows" integer NOT NULL,
	"failed_rows" integer NOT NULL,
	"first_row" integer NOT NULL,
	"last_row" integer NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "job_parts_job_id_seq_pk" PRIMARY KEY("job_id","seq")
);
--> statement-breakpoint
CREATE TABLE "jobs" (
	"id" text PRIMARY KEY NOT NULL,
	"workspace_id" text NOT NULL,
	"spec" jsonb NOT NULL,
	"state" text DEFAULT 'pending' NOT NULL,
	"attempt" integer DEFAULT 0 NOT NULL,
	"runner_token_id" text,
	"done" jsonb DEFAULT '[]'::jsonb NOT NULL,
	"total_rows" integer,
	"done_rows" integer DEFAULT 0 NOT NULL,
	"failed_rows" integer DEFAULT 0 NOT NULL,
	"samples" jsonb DEFAULT '[]'::jsonb NOT NULL,
	"parts" integer DEFAULT 0 NOT NULL,
	"output_file_id" text,
	"error_file_id" text,
	"metadata" jsonb,
	"outcome" text,
	"reason" text,
	"lease_instance_id" text,
	"lease_expires_at" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"started_at" timestamp with time zone,
	"finalizing_at" timestamp with time zone,
	"cancelling_at" timestamp with time zone,
	"finished_at" timestamp with time zone,
	"expires_at" timestamp with time zone
);
--> statement-breakpoint
CREATE INDEX "jobs_workspace" ON "jobs" USING btree ("workspace_id","id");--> statement-breakpoint
CREATE INDEX "jobs_live" ON "jobs" USING btree ("state");