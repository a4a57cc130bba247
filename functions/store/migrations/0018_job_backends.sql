ALTER TABLE "runs" ADD COLUMN "job_id" text;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "handle" text;--> statement-breakpoint
ALTER TABLE "jobs" ADD COLUMN "swarm_id" text;--> statement-breakpoint
CREATE INDEX "jobs_swarm" ON "jobs" USING btree ("swarm_id");