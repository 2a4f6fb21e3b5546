ALTER TABLE "checkpoints" ADD COLUMN "lease_activity" text;--> statement-breakpoint
ALTER TABLE "checkpoints" ADD COLUMN "lease_attempt" integer;