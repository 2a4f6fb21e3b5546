CREATE TABLE "checkpoints" (
	"consumer_id" text PRIMARY KEY NOT NULL,
	"position" bigint,
	"token" text,
	"generation" integer,
	"cut_position" bigint,
	"cut_reached" boolean DEFAULT false NOT NULL,
	"version" integer DEFAULT 0 NOT NULL,
	"lease_epoch" integer DEFAULT 0 NOT NULL,
	"pending_start" text,
	"abandoned" boolean DEFAULT false NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "checkpoints_pending_start_check" CHECK ("checkpoints"."pending_start" IS NULL OR "checkpoints"."pending_start" IN ('live_cut', 'from_floor')),
	CONSTRAINT "checkpoints_token_not_empty" CHECK ("checkpoints"."token" IS NULL OR length("checkpoints"."token") > 0)
);
--> statement-breakpoint
CREATE TABLE "consumer_bindings" (
	"consumer_id" text PRIMARY KEY NOT NULL,
	"subscription_id" text NOT NULL,
	"stream" text NOT NULL,
	"history_id" text NOT NULL,
	"filter" jsonb NOT NULL,
	"filter_hash" text NOT NULL,
	"generation" integer NOT NULL,
	"mappings" jsonb NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "decisions" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"consumer_id" text NOT NULL,
	"kind" text NOT NULL,
	"decision" text NOT NULL,
	"actor" text NOT NULL,
	"reason" text NOT NULL,
	"replaced_token" text,
	"details" jsonb,
	"decided_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "decisions_kind_check" CHECK ("decisions"."kind" IN ('gap', 'binding', 'quarantine'))
);
--> statement-breakpoint
CREATE TABLE "event_receipts" (
	"consumer_id" text NOT NULL,
	"event_id" text NOT NULL,
	"content_hash" text NOT NULL,
	"position" bigint NOT NULL,
	"ordinal" integer NOT NULL,
	"outcome" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "event_receipts_consumer_id_event_id_pk" PRIMARY KEY("consumer_id","event_id"),
	CONSTRAINT "event_receipts_outcome_check" CHECK ("event_receipts"."outcome" IN ('applied', 'no_effect', 'quarantined'))
);
--> statement-breakpoint
CREATE TABLE "execution_revisions" (
	"consumer_id" text NOT NULL,
	"entity_id" text NOT NULL,
	"revision" integer NOT NULL,
	"event_id" text NOT NULL,
	"position" bigint NOT NULL,
	"market" text NOT NULL,
	"asset" text NOT NULL,
	"side" text NOT NULL,
	"price" numeric NOT NULL,
	"size" numeric NOT NULL,
	"notional" numeric NOT NULL,
	"wallet" text NOT NULL,
	"tx_hash" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "execution_revisions_consumer_id_entity_id_revision_pk" PRIMARY KEY("consumer_id","entity_id","revision")
);
--> statement-breakpoint
CREATE TABLE "executions" (
	"consumer_id" text NOT NULL,
	"entity_id" text NOT NULL,
	"revision" integer NOT NULL,
	"market" text NOT NULL,
	"asset" text NOT NULL,
	"side" text NOT NULL,
	"price" numeric NOT NULL,
	"size" numeric NOT NULL,
	"notional" numeric NOT NULL,
	"wallet" text NOT NULL,
	"tx_hash" text NOT NULL,
	"first_position" bigint NOT NULL,
	"last_position" bigint NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "executions_consumer_id_entity_id_pk" PRIMARY KEY("consumer_id","entity_id")
);
--> statement-breakpoint
CREATE TABLE "market_volumes" (
	"consumer_id" text NOT NULL,
	"market" text NOT NULL,
	"volume" numeric DEFAULT '0' NOT NULL,
	"execution_count" integer DEFAULT 0 NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "market_volumes_consumer_id_market_pk" PRIMARY KEY("consumer_id","market")
);
--> statement-breakpoint
CREATE TABLE "outbox" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"consumer_id" text NOT NULL,
	"idempotency_key" text NOT NULL,
	"event_id" text NOT NULL,
	"action" text NOT NULL,
	"payload" jsonb NOT NULL,
	"status" text DEFAULT 'pending' NOT NULL,
	"attempts" integer DEFAULT 0 NOT NULL,
	"last_error" text,
	"available_at" timestamp with time zone DEFAULT now() NOT NULL,
	"claimed_until" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	"completed_at" timestamp with time zone,
	CONSTRAINT "outbox_status_check" CHECK ("outbox"."status" IN ('pending', 'claimed', 'done', 'dead'))
);
--> statement-breakpoint
CREATE TABLE "quarantine" (
	"consumer_id" text NOT NULL,
	"event_id" text NOT NULL,
	"entity_id" text NOT NULL,
	"kind" text NOT NULL,
	"position" bigint NOT NULL,
	"ordinal" integer NOT NULL,
	"content_hash" text NOT NULL,
	"reason" text NOT NULL,
	"disposition" text NOT NULL,
	"decided_by" text,
	"decided_at" timestamp with time zone,
	"why" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "quarantine_consumer_id_event_id_pk" PRIMARY KEY("consumer_id","event_id"),
	CONSTRAINT "quarantine_disposition_check" CHECK ("quarantine"."disposition" IN ('held', 'terminal', 'retry')),
	CONSTRAINT "quarantine_reason_check" CHECK ("quarantine"."reason" IN ('unknown_correction_target', 'unsupported_kind'))
);
--> statement-breakpoint
CREATE TABLE "source_quality" (
	"consumer_id" text NOT NULL,
	"scope" text NOT NULL,
	"state" text NOT NULL,
	"last_position" bigint NOT NULL,
	"as_of" bigint NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "source_quality_consumer_id_scope_pk" PRIMARY KEY("consumer_id","scope"),
	CONSTRAINT "source_quality_state_check" CHECK ("source_quality"."state" IN ('ok', 'degraded', 'gap'))
);
--> statement-breakpoint
CREATE INDEX "decisions_consumer_idx" ON "decisions" USING btree ("consumer_id","id");--> statement-breakpoint
CREATE INDEX "executions_market_idx" ON "executions" USING btree ("consumer_id","market");--> statement-breakpoint
CREATE INDEX "executions_wallet_idx" ON "executions" USING btree ("consumer_id","wallet");--> statement-breakpoint
CREATE UNIQUE INDEX "outbox_idempotency_idx" ON "outbox" USING btree ("consumer_id","idempotency_key");--> statement-breakpoint
CREATE INDEX "outbox_due_idx" ON "outbox" USING btree ("available_at","id") WHERE "outbox"."status" IN ('pending', 'claimed');--> statement-breakpoint
CREATE INDEX "quarantine_disposition_idx" ON "quarantine" USING btree ("consumer_id","disposition","position");