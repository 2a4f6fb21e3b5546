-- Content hashes are stored as their digest's bytes (db/content-hash-column.ts): a current hash `v2:<hex>` as 0x02
-- and the 32 digest bytes, a legacy one `<hex>` as the 32 bytes alone. Every streamed event writes a receipt, and
-- its hash as text was the widest column the commit sent and stored.
-- Every hash the consumer ever wrote is of one of those two forms; a row of neither stops the migration with its
-- table and key instead of being stored as something no comparison would match.
-- Each ALTER rewrites its table and holds its ACCESS EXCLUSIVE lock meanwhile: on millions of receipts, minutes.
DO $$
DECLARE
  bad record;
BEGIN
  FOR bad IN
    SELECT 'event_receipts' AS tbl, consumer_id, event_id, content_hash FROM event_receipts
     WHERE content_hash !~ '^(v2:)?[0-9a-f]{64}$'
    UNION ALL
    SELECT 'quarantine', consumer_id, event_id, content_hash FROM quarantine
     WHERE content_hash !~ '^(v2:)?[0-9a-f]{64}$'
    LIMIT 1
  LOOP
    RAISE EXCEPTION 'content_hash of % (consumer %, event %) is not a content hash: %',
      bad.tbl, bad.consumer_id, bad.event_id, bad.content_hash
      USING ERRCODE = 'data_exception', HINT = 'expected v2: and 64 lowercase hex digits, or 64 lowercase hex digits';
  END LOOP;
END $$;--> statement-breakpoint
ALTER TABLE "event_receipts" ALTER COLUMN "content_hash" SET DATA TYPE bytea
  USING CASE WHEN content_hash LIKE 'v2:%' THEN '\x02'::bytea || decode(substr(content_hash, 4), 'hex')
             ELSE decode(content_hash, 'hex') END;--> statement-breakpoint
ALTER TABLE "quarantine" ALTER COLUMN "content_hash" SET DATA TYPE bytea
  USING CASE WHEN content_hash LIKE 'v2:%' THEN '\x02'::bytea || decode(substr(content_hash, 4), 'hex')
             ELSE decode(content_hash, 'hex') END;
