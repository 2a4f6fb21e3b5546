DROP INDEX "executions_market_idx";--> statement-breakpoint
DROP INDEX "executions_wallet_idx";--> statement-breakpoint
-- executions now name the event of their current revision, and execution_revisions keeps only superseded
-- revisions. Existing rows are carried over: the current revision's event comes from its history row, which
-- is then removed from the history (it is the current state, not a superseded one).
ALTER TABLE "executions" ADD COLUMN "event_id" text;--> statement-breakpoint
UPDATE "executions" e SET "event_id" = r."event_id"
  FROM "execution_revisions" r
 WHERE r."consumer_id" = e."consumer_id" AND r."entity_id" = e."entity_id" AND r."revision" = e."revision";--> statement-breakpoint
DELETE FROM "execution_revisions" r
 USING "executions" e
 WHERE r."consumer_id" = e."consumer_id" AND r."entity_id" = e."entity_id" AND r."revision" = e."revision";--> statement-breakpoint
UPDATE "executions" SET "event_id" = '' WHERE "event_id" IS NULL;--> statement-breakpoint
ALTER TABLE "executions" ALTER COLUMN "event_id" SET NOT NULL;
