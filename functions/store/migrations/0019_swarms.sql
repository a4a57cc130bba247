CREATE TABLE "swarms" (
	"id" text PRIMARY KEY NOT NULL,
	"workspace_id" text NOT NULL,
	"name" text NOT NULL,
	"deployment_name" text NOT NULL,
	"config" jsonb NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "swarms" ADD CONSTRAINT "swarms_workspace_id_workspaces_id_fk" FOREIGN KEY ("workspace_id") REFERENCES "public"."workspaces"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "swarms_name" ON "swarms" USING btree ("workspace_id","name");--> statement-breakpoint
CREATE UNIQUE INDEX "swarms_deployment" ON "swarms" USING btree ("workspace_id","deployment_name");