ALTER TABLE "deployments" ADD COLUMN "autoscale" jsonb;--> statement-breakpoint
ALTER TABLE "deployments" ADD COLUMN "autoscale_state" jsonb;