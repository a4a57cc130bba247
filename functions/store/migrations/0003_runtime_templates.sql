CREATE TABLE "runtime_templates" (
	"workspace_id" text NOT NULL,
	"name" text NOT NULL,
	"spec" jsonb NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "runtime_templates_workspace_id_name_pk" PRIMARY KEY("workspace_id","name")
);
--> statement-breakpoint
CREATE TABLE "runtime_secrets" (
	"workspace_id" text NOT NULL,
	"name" text NOT NULL,
	"sealed" text NOT NULL,
	"key_id" text NOT NULL,
	"version" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "runtime_secrets_workspace_id_name_pk" PRIMARY KEY("workspace_id","name")
);
--> statement-breakpoint
ALTER TABLE "runtime_templates" ADD CONSTRAINT "runtime_templates_workspace_id_workspaces_id_fk" FOREIGN KEY ("workspace_id") REFERENCES "public"."workspaces"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "runtime_secrets" ADD CONSTRAINT "runtime_secrets_workspace_id_workspaces_id_fk" FOREIGN KEY ("workspace_id") REFERENCES "public"."workspaces"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
-- The free-form `process` runtime is gone (a deployment now names a registered runtime template): deployments
-- still declaring one are retired, their replicas leave their machines' desired state, and an audit row says so.
INSERT INTO "audit_events" ("id", "workspace_id", "actor", "action", "target", "details")
SELECT 'aud_0003_' || "id", "workspace_id", 'system', 'deployment.delete', "id", jsonb_build_object('name', "name", 'reason', 'the process runtime was removed: redeclare it with a runtime template')
FROM "deployments" WHERE "deleted_at" IS NULL AND "runtime"->>'kind' = 'process';--> statement-breakpoint
UPDATE "machines" SET "desired_gen" = "desired_gen" + 1
WHERE "id" IN (SELECT "machine_id" FROM "assignments" WHERE "removed_at" IS NULL AND "spec"->'runtime'->>'kind' = 'process');--> statement-breakpoint
UPDATE "assignments" SET "removed_at" = now() WHERE "removed_at" IS NULL AND "spec"->'runtime'->>'kind' = 'process';--> statement-breakpoint
UPDATE "deployments" SET "deleted_at" = now(), "updated_at" = now() WHERE "deleted_at" IS NULL AND "runtime"->>'kind' = 'process';
