CREATE TABLE "maintenance_runs" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"started_at" timestamp with time zone DEFAULT now() NOT NULL,
	"finished_at" timestamp with time zone,
	"status" text DEFAULT 'running' NOT NULL,
	"receipts_deleted" bigint DEFAULT 0 NOT NULL,
	"outbox_deleted" bigint DEFAULT 0 NOT NULL,
	"revisions_deleted" bigint DEFAULT 0 NOT NULL,
	"details" jsonb,
	"error" text,
	CONSTRAINT "maintenance_runs_status_check" CHECK ("maintenance_runs"."status" IN ('running', 'succeeded', 'failed'))
);
--> statement-breakpoint
CREATE TABLE "retention_floors" (
	"consumer_id" text PRIMARY KEY NOT NULL,
	"history_id" text NOT NULL,
	"floor" bigint NOT NULL,
	"pruned_below" bigint DEFAULT 0 NOT NULL,
	"observed_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE INDEX "event_receipts_position_brin" ON "event_receipts" USING brin ("position") WITH (autosummarize=true);