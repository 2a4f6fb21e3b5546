ALTER TABLE "page_progress" ADD COLUMN "events_applied" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
-- Page consumers that applied events before this column start from their applied receipts, the count the handover
-- took until now (receipts retention already removed are missing from both).
UPDATE "page_progress" p
   SET "events_applied" = (SELECT count(*) FROM "event_receipts" r WHERE r."consumer_id" = p."consumer_id" AND r."outcome" = 'applied');
