DROP TABLE "invocation_payloads" CASCADE;--> statement-breakpoint
DROP TABLE "payload_receipts" CASCADE;--> statement-breakpoint
ALTER TABLE "instances" ADD COLUMN "peer_url" text;