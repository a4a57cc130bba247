CREATE TABLE "telemetry_samples" (
	"machine_id" text NOT NULL,
	"workspace_id" text NOT NULL,
	"at" timestamp with time zone NOT NULL,
	"gpus" jsonb NOT NULL,
	"runtimes" jsonb NOT NULL,
	CONSTRAINT "telemetry_samples_machine_id_at_pk" PRIMARY KEY("machine_id","at")
);
--> statement-breakpoint
ALTER TABLE "machines" ADD COLUMN "gpus" jsonb DEFAULT '[]'::jsonb NOT NULL;--> statement-breakpoint
ALTER TABLE "machines" ADD COLUMN "telemetry_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "runtime_reports" ADD COLUMN "engine" jsonb;--> statement-breakpoint
CREATE INDEX "telemetry_samples_workspace_at" ON "telemetry_samples" USING btree ("workspace_id","at");--> statement-breakpoint
CREATE INDEX "telemetry_samples_at" ON "telemetry_samples" USING btree ("at");