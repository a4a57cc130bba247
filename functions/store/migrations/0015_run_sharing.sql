CREATE TABLE "run_holds" (
	"workspace_id" text NOT NULL,
	"run_id" text NOT NULL,
	"worker_id" text NOT NULL,
	"gpus" integer NOT NULL,
	"held_from" timestamp with time zone NOT NULL,
	"held_to" timestamp with time zone NOT NULL,
	CONSTRAINT "run_holds_worker_id_held_from_pk" PRIMARY KEY("worker_id","held_from")
);
--> statement-breakpoint
ALTER TABLE "machines" ADD COLUMN "shared" boolean DEFAULT false NOT NULL;--> statement-breakpoint
CREATE INDEX "run_holds_to" ON "run_holds" USING btree ("held_to");