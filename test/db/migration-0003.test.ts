// Migration 0003 (whale alert signals) on a database that already holds outbox rows: it only adds (a column,
// states, an index, the NOTIFY triggers). Every existing row keeps its key, state, attempts and error, none is
// marked suppressed, and the dispatcher's claim still finds the pending one; the new constraints hold.
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { claimOutbox, OUTBOX_CHANNEL } from '../../db/index.js';
import { migrate } from '../../db/migrate.js';
import { useTestDatabase } from '../support/db.js';
import { migrateBefore } from '../support/migrations.js';

const db = useTestDatabase({ migrated: false });

describe('migration 0003_whale_alert_signals', () => {
  it('keeps every existing outbox row as it was, and the rows of both kinds keep working', async () => {
    await migrateBefore(db.pool, '0003');
    await db.pool.query(
      `INSERT INTO outbox (consumer_id, idempotency_key, event_id, action, payload, status, attempts, last_error)
       VALUES ('c', 'whale_alert:ev-1', 'ev-1', 'whale_alert', '{"entityId":"a"}', 'pending', 0, NULL),
              ('c', 'whale_alert:ev-2', 'ev-2', 'whale_alert', '{"entityId":"b"}', 'done', 1, NULL),
              ('c', 'whale_alert:ev-3', 'ev-3', 'whale_alert', '{"entityId":"c"}', 'dead', 10, 'HTTP 500')`,
    );
    const rows = () =>
      db.pool.query<Record<string, unknown>>(
        `SELECT idempotency_key, event_id, status, attempts, last_error, payload FROM outbox ORDER BY id`,
      );
    const old = (await rows()).rows;

    await migrate(db.pool);
    expect((await rows()).rows).toEqual(old);
    const reasons = await db.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM outbox WHERE suppressed_reason IS NOT NULL`,
    );
    expect(reasons.rows[0]!.n).toBe(0);
    expect((await claimOutbox(db.pool, { limit: 10, leaseMs: 60_000 })).map((i) => i.idempotencyKey)).toEqual([
      'whale_alert:ev-1',
    ]);

    // The new states and their rule: a suppressed row names its reason, and only a known one.
    await db.pool.query(
      `INSERT INTO outbox (consumer_id, idempotency_key, event_id, action, payload, status, suppressed_reason)
       VALUES ('c', 'whale_alert:ev-4', 'ev-4', 'whale_alert', '{}', 'suppressed', 'replay')`,
    );
    const refused = (sql: string) =>
      db.pool.query(sql).then(
        () => null,
        (error: { code?: string }) => error.code,
      );
    expect(
      await refused(`INSERT INTO outbox (consumer_id, idempotency_key, event_id, action, payload, status)
                     VALUES ('c', 'whale_alert:ev-5', 'ev-5', 'whale_alert', '{}', 'suppressed')`),
    ).toBe('23514');
    expect(
      await refused(`INSERT INTO outbox (consumer_id, idempotency_key, event_id, action, payload, suppressed_reason)
                     VALUES ('c', 'whale_alert:ev-6', 'ev-6', 'whale_alert', '{}', 'late')`),
    ).toBe('23514');
    expect(
      await refused(`INSERT INTO outbox (consumer_id, idempotency_key, event_id, action, payload, status, suppressed_reason)
                     VALUES ('c', 'whale_alert:ev-7', 'ev-7', 'whale_alert', '{}', 'suppressed', 'boredom')`),
    ).toBe('23514');
  });

  it('notifies the dispatchers when an insert or an update leaves an alert due now, and only then', async () => {
    const listener = new pg.Client({ connectionString: db.url });
    await listener.connect();
    const notified: string[] = [];
    listener.on('notification', (n) => notified.push(n.channel));
    await listener.query(`LISTEN ${OUTBOX_CHANNEL}`);
    try {
      // A marker round trip: notifications of earlier statements arrive before its answer.
      const settle = async () => {
        await db.pool.query(`SELECT pg_notify('whalehunt_marker', '')`);
        await listener.query('SELECT 1');
      };
      await db.pool.query(
        `INSERT INTO outbox (consumer_id, idempotency_key, event_id, action, payload, status, suppressed_reason)
         VALUES ('n', 'whale_alert:s', 's', 'whale_alert', '{}', 'suppressed', 'late')`,
      );
      await db.pool.query(
        `INSERT INTO outbox (consumer_id, idempotency_key, event_id, action, payload, available_at)
         VALUES ('n', 'whale_alert:later', 'later', 'whale_alert', '{}', now() + interval '1 hour')`,
      );
      await settle();
      expect(notified).toEqual([]);
      await db.pool.query(
        `INSERT INTO outbox (consumer_id, idempotency_key, event_id, action, payload)
         VALUES ('n', 'whale_alert:now', 'now', 'whale_alert', '{}')`,
      );
      await settle();
      expect(notified).toEqual([OUTBOX_CHANNEL]);
      // An operator's retry makes the suppressed one due now.
      await db.pool.query(
        `UPDATE outbox SET status = 'pending', suppressed_reason = NULL WHERE idempotency_key = 'whale_alert:s'`,
      );
      await settle();
      expect(notified).toEqual([OUTBOX_CHANNEL, OUTBOX_CHANNEL]);
    } finally {
      await listener.end();
    }
  });
});
