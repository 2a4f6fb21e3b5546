ALTER TABLE "decisions" DROP CONSTRAINT "decisions_kind_check";--> statement-breakpoint
ALTER TABLE "outbox" DROP CONSTRAINT "outbox_status_check";--> statement-breakpoint
ALTER TABLE "outbox" ADD COLUMN "suppressed_reason" text;--> statement-breakpoint
CREATE INDEX "outbox_dead_idx" ON "outbox" USING btree ("consumer_id","id") WHERE "outbox"."status" = 'dead';--> statement-breakpoint
ALTER TABLE "decisions" ADD CONSTRAINT "decisions_kind_check" CHECK ("decisions"."kind" IN ('gap', 'binding', 'quarantine', 'alert'));--> statement-breakpoint
ALTER TABLE "outbox" ADD CONSTRAINT "outbox_suppressed_reason_check" CHECK (("outbox"."status" = 'suppressed') = ("outbox"."suppressed_reason" IS NOT NULL) AND ("outbox"."suppressed_reason" IS NULL OR "outbox"."suppressed_reason" IN ('replay', 'backfill', 'late', 'correction')));--> statement-breakpoint
ALTER TABLE "outbox" ADD CONSTRAINT "outbox_status_check" CHECK ("outbox"."status" IN ('pending', 'claimed', 'done', 'dead', 'suppressed', 'dropped'));--> statement-breakpoint
-- Wakes the outbox dispatchers (LISTEN whalehunt_outbox) when a statement leaves an alert due now: a commit's
-- insert, or an operator's retry. Delivered at COMMIT, once per transaction; the dispatchers poll as a fallback.
CREATE FUNCTION "whalehunt_outbox_notify"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM changed WHERE status = 'pending' AND available_at <= now()) THEN
    PERFORM pg_notify('whalehunt_outbox', '');
  END IF;
  RETURN NULL;
END
$$;--> statement-breakpoint
CREATE TRIGGER "outbox_notify_insert" AFTER INSERT ON "outbox" REFERENCING NEW TABLE AS changed
  FOR EACH STATEMENT EXECUTE FUNCTION "whalehunt_outbox_notify"();--> statement-breakpoint
CREATE TRIGGER "outbox_notify_update" AFTER UPDATE ON "outbox" REFERENCING NEW TABLE AS changed
  FOR EACH STATEMENT EXECUTE FUNCTION "whalehunt_outbox_notify"();
