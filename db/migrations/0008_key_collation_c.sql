-- The columns keys and indexes are made of compare byte by byte (COLLATE "C") whatever the database's default
-- collation: under a linguistic one (en_US.UTF-8, the official postgres image's default) each comparison of a B-tree
-- insert or probe calls strcoll. Equality is unchanged; only ORDER BY of these columns changes, to byte order.
-- One ALTER per table, so each table's indexes are rebuilt once (the rows are not rewritten: the type is the same).
-- It holds each table's ACCESS EXCLUSIVE lock while its indexes rebuild: on millions of receipts, some minutes.
ALTER TABLE "checkpoints" ALTER COLUMN "consumer_id" SET DATA TYPE text COLLATE "C";--> statement-breakpoint
ALTER TABLE "consumer_bindings" ALTER COLUMN "consumer_id" SET DATA TYPE text COLLATE "C";--> statement-breakpoint
ALTER TABLE "decisions" ALTER COLUMN "consumer_id" SET DATA TYPE text COLLATE "C";--> statement-breakpoint
ALTER TABLE "event_receipts" ALTER COLUMN "consumer_id" SET DATA TYPE text COLLATE "C",
                             ALTER COLUMN "event_id" SET DATA TYPE text COLLATE "C";--> statement-breakpoint
ALTER TABLE "execution_revisions" ALTER COLUMN "consumer_id" SET DATA TYPE text COLLATE "C",
                                  ALTER COLUMN "entity_id" SET DATA TYPE text COLLATE "C";--> statement-breakpoint
ALTER TABLE "executions" ALTER COLUMN "consumer_id" SET DATA TYPE text COLLATE "C",
                         ALTER COLUMN "entity_id" SET DATA TYPE text COLLATE "C";--> statement-breakpoint
ALTER TABLE "market_volumes" ALTER COLUMN "consumer_id" SET DATA TYPE text COLLATE "C",
                             ALTER COLUMN "market" SET DATA TYPE text COLLATE "C";--> statement-breakpoint
ALTER TABLE "outbox" ALTER COLUMN "consumer_id" SET DATA TYPE text COLLATE "C",
                     ALTER COLUMN "idempotency_key" SET DATA TYPE text COLLATE "C";--> statement-breakpoint
ALTER TABLE "page_progress" ALTER COLUMN "consumer_id" SET DATA TYPE text COLLATE "C";--> statement-breakpoint
ALTER TABLE "quarantine" ALTER COLUMN "consumer_id" SET DATA TYPE text COLLATE "C",
                         ALTER COLUMN "event_id" SET DATA TYPE text COLLATE "C",
                         ALTER COLUMN "disposition" SET DATA TYPE text COLLATE "C";--> statement-breakpoint
ALTER TABLE "retention_floors" ALTER COLUMN "consumer_id" SET DATA TYPE text COLLATE "C";--> statement-breakpoint
ALTER TABLE "source_quality" ALTER COLUMN "consumer_id" SET DATA TYPE text COLLATE "C",
                             ALTER COLUMN "scope" SET DATA TYPE text COLLATE "C";
