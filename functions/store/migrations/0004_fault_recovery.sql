CREATE TABLE "instances" (
	"id" text PRIMARY KEY NOT NULL,
	"started_at" timestamp with time zone DEFAULT now() NOT NULL,
	"renewed_at" timestamp with time zone DEFAULT now() NOT NULL,
	"expires_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
CREATE TABLE "replica_failures" (
	"id" text PRIMARY KEY NOT NULL,
	"deployment_id" text NOT NULL,
	"machine_id" text NOT NULL,
	"assignment_id" text NOT NULL,
	"reason" text NOT NULL,
	"failed_at" timestamp with time zone DEFAULT now() NOT NULL,
	"cleared_at" timestamp with time zone
);
--> statement-breakpoint
ALTER TABLE "stream_leases" ADD COLUMN "answered_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "replica_failures" ADD CONSTRAINT "replica_failures_deployment_id_deployments_id_fk" FOREIGN KEY ("deployment_id") REFERENCES "public"."deployments"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "replica_failures" ADD CONSTRAINT "replica_failures_machine_id_machines_id_fk" FOREIGN KEY ("machine_id") REFERENCES "public"."machines"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "replica_failures_open" ON "replica_failures" USING btree ("machine_id","deployment_id");