ALTER TABLE "checkpoints" ADD COLUMN "checkpoints_committed" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "checkpoints" ADD COLUMN "events_applied" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
-- Consumers that committed before these columns: their applied receipts are exactly the events applied; the
-- checkpoint count is taken as the version, which also counts their state-changing decisions.
UPDATE "checkpoints" c
   SET "events_applied" = (SELECT count(*) FROM "event_receipts" r WHERE r."consumer_id" = c."consumer_id" AND r."outcome" = 'applied'),
       "checkpoints_committed" = c."version";
