CREATE TABLE "page_progress" (
	"consumer_id" text PRIMARY KEY NOT NULL,
	"stream" text NOT NULL,
	"filter" jsonb NOT NULL,
	"filter_hash" text NOT NULL,
	"history_id" text,
	"resume_cursor" text,
	"applied_position" bigint DEFAULT 0 NOT NULL,
	"version" integer DEFAULT 0 NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "page_progress_cursor_not_empty" CHECK ("page_progress"."resume_cursor" IS NULL OR length("page_progress"."resume_cursor") > 0)
);
