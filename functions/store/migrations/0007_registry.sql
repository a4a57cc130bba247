CREATE TABLE "models" (
	"id" text PRIMARY KEY NOT NULL,
	"workspace_id" text NOT NULL,
	"name" text NOT NULL,
	"description" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"deleted_at" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "model_versions" (
	"id" text PRIMARY KEY NOT NULL,
	"model_id" text NOT NULL,
	"workspace_id" text NOT NULL,
	"version" text NOT NULL,
	"format" text NOT NULL,
	"licence" text,
	"provenance" jsonb,
	"manifest" jsonb NOT NULL,
	"file_count" bigint NOT NULL,
	"total_bytes" bigint NOT NULL,
	"state" text DEFAULT 'candidate' NOT NULL,
	"verification" jsonb,
	"created_by" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "model_evaluations" (
	"id" text PRIMARY KEY NOT NULL,
	"version_id" text NOT NULL,
	"suite" text NOT NULL,
	"passed" boolean NOT NULL,
	"metrics" jsonb NOT NULL,
	"notes" text,
	"recorded_by" text NOT NULL,
	"at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "model_aliases" (
	"workspace_id" text NOT NULL,
	"name" text NOT NULL,
	"version_id" text NOT NULL,
	"updated_by" text NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "model_aliases_workspace_id_name_pk" PRIMARY KEY("workspace_id","name")
);
--> statement-breakpoint
CREATE TABLE "model_alias_moves" (
	"id" text PRIMARY KEY NOT NULL,
	"workspace_id" text NOT NULL,
	"alias" text NOT NULL,
	"from_version_id" text,
	"to_version_id" text NOT NULL,
	"rollback" boolean DEFAULT false NOT NULL,
	"by" text NOT NULL,
	"reason" text NOT NULL,
	"at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "models" ADD CONSTRAINT "models_workspace_id_workspaces_id_fk" FOREIGN KEY ("workspace_id") REFERENCES "public"."workspaces"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "model_versions" ADD CONSTRAINT "model_versions_model_id_models_id_fk" FOREIGN KEY ("model_id") REFERENCES "public"."models"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "model_versions" ADD CONSTRAINT "model_versions_workspace_id_workspaces_id_fk" FOREIGN KEY ("workspace_id") REFERENCES "public"."workspaces"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "model_evaluations" ADD CONSTRAINT "model_evaluations_version_id_model_versions_id_fk" FOREIGN KEY ("version_id") REFERENCES "public"."model_versions"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "model_aliases" ADD CONSTRAINT "model_aliases_workspace_id_workspaces_id_fk" FOREIGN KEY ("workspace_id") REFERENCES "public"."workspaces"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "model_aliases" ADD CONSTRAINT "model_aliases_version_id_model_versions_id_fk" FOREIGN KEY ("version_id") REFERENCES "public"."model_versions"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "model_alias_moves" ADD CONSTRAINT "model_alias_moves_from_version_id_model_versions_id_fk" FOREIGN KEY ("from_version_id") REFERENCES "public"."model_versions"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "model_alias_moves" ADD CONSTRAINT "model_alias_moves_to_version_id_model_versions_id_fk" FOREIGN KEY ("to_version_id") REFERENCES "public"."model_versions"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "models_live_name" ON "models" USING btree ("workspace_id","name") WHERE "models"."deleted_at" is null;--> statement-breakpoint
CREATE UNIQUE INDEX "model_versions_label" ON "model_versions" USING btree ("model_id","version");--> statement-breakpoint
CREATE INDEX "model_evaluations_version" ON "model_evaluations" USING btree ("version_id","id");--> statement-breakpoint
CREATE INDEX "model_alias_moves_alias" ON "model_alias_moves" USING btree ("workspace_id","alias","at");