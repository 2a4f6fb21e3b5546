// Migration 0008 (key collation "C") on a database whose default collation is linguistic (ICU en-US, what a server
// initialised in en_US.UTF-8 has): the rows an older release wrote keep their keys, every index's text column then
// compares bytes, the commit's probes can still use the primary keys, and a consumer commits on.
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { committed, correction, makePlan, trade, tradeData } from '../../bench/fixtures.js';
import { READ_EVENTS_SQL } from '../../db/commit-sql.js';
import { contentHashOf } from '../../db/content-hash-column.js';
import { acquireLease, commitCheckpoint, migrate } from '../../db/index.js';
import type { StagedEvent } from '../../protocol/types.js';
import { useTestDatabase } from '../support/db.js';
import { migrateBefore } from '../support/migrations.js';

const db = useTestDatabase({ migrated: false, linguisticCollation: true });

/** Ids whose order differs: en-US ignores the underscore and the case, bytes put 'B' < '_' < 'a'. */
const IDS = ['a', 'B', '_z'];

async function receiptIdsInOrder(): Promise<string[]> {
  const { rows } = await db.pool.query<{ event_id: string }>(
    `SELECT event_id FROM event_receipts WHERE consumer_id = 'older' ORDER BY event_id`,
  );
  return rows.map((r) => r.event_id);
}

describe('migration 0008_key_collation_c', () => {
  it('keeps the saved keys, makes every indexed text column compare bytes, and the commit runs on', async () => {
    await migrateBefore(db.pool, '0008');
    await db.pool.query(
      `INSERT INTO event_receipts (consumer_id, event_id, content_hash, position, ordinal, outcome)
       SELECT 'older', id, 'v2:' || encode(sha256(convert_to(id, 'UTF8')), 'hex'), 1, n, 'applied'
         FROM unnest($1::text[]) WITH ORDINALITY AS ids(id, n)`,
      [IDS],
    );
    // The premise: this database orders these ids linguistically.
    expect(await receiptIdsInOrder()).toEqual(['_z', 'a', 'B']);

    await migrate(db.pool);

    expect(await receiptIdsInOrder()).toEqual(['B', '_z', 'a']);
    const kept = await db.pool.query<{ event_id: string; content_hash: Buffer }>(
      `SELECT event_id, content_hash FROM event_receipts WHERE consumer_id = 'older' ORDER BY ordinal`,
    );
    expect(kept.rows.map((r) => ({ event_id: r.event_id, content_hash: contentHashOf(r.content_hash) }))).toEqual(
      IDS.map((id) => ({ event_id: id, content_hash: `v2:${createHash('sha256').update(id).digest('hex')}` })),
    );

    // Every text column of every index in the schema, now and as later migrations add them, compares bytes.
    const indexedText = await db.pool.query<{ index: string; collation: string }>(
      `SELECT c.relname AS index, coll.collname AS collation
         FROM pg_index i
         JOIN pg_class c ON c.oid = i.indexrelid
         JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public'
         CROSS JOIN LATERAL unnest(i.indcollation::oid[]) AS k(oid)
         JOIN pg_collation coll ON coll.oid = k.oid
        ORDER BY 1`,
    );
    expect(indexedText.rows.filter((r) => r.collation !== 'C')).toEqual([]);
    expect(indexedText.rows.map((r) => r.index)).toEqual(
      expect.arrayContaining([
        'event_receipts_consumer_id_event_id_pk',
        'executions_consumer_id_entity_id_pk',
        'outbox_idempotency_idx',
        'quarantine_consumer_id_event_id_pk',
      ]),
    );

    // The commit's parameters carry the database's default collation; the column's wins, so the probe of the
    // primary key stays possible (a mismatch would leave a scan of every receipt as the only plan).
    const client = await db.pool.connect();
    try {
      await client.query('SET enable_seqscan = off');
      const plan = await client.query<{ 'QUERY PLAN': unknown }>({
        text: `EXPLAIN (FORMAT JSON) ${READ_EVENTS_SQL}`,
        values: ['older', IDS],
      });
      expect(JSON.stringify(plan.rows[0]!['QUERY PLAN'])).toContain(
        '"Index Name":"event_receipts_consumer_id_event_id_pk"',
      );
    } finally {
      client.release();
    }

    // A consumer commits new trades in one statement, then a duplicate and a correction by the exact path.
    const lease = await acquireLease(db.pool, 'after-upgrade');
    const commitAt = async (version: number, position: number, events: StagedEvent[]) =>
      committed(
        await commitCheckpoint(
          db.pool,
          makePlan('after-upgrade', {
            fence: { leaseEpoch: lease.leaseEpoch, version },
            position,
            startMode: position === 1 ? 'from_floor' : 'resume',
            events,
          }),
        ),
      );
    const first = await commitAt(lease.version, 1, [
      trade(1, 'B-entity', {}, { ordinal: 1, eventId: 'B' }),
      trade(1, '_z-entity', {}, { ordinal: 2, eventId: '_z' }),
    ]);
    expect(first).toMatchObject({ applied: 2, duplicates: 0 });
    const second = await commitAt(first.version, 2, [
      trade(2, 'B-entity', {}, { ordinal: 1, eventId: 'B' }),
      correction(2, '_z-entity', 2, { size: '7' }, { ordinal: 2, eventId: 'a' }),
    ]);
    expect(second).toMatchObject({ applied: 1, duplicates: 1 });
    const executions = await db.pool.query<{ entity_id: string; revision: number; size: string }>(
      `SELECT entity_id, revision, size::text FROM executions WHERE consumer_id = 'after-upgrade' ORDER BY entity_id`,
    );
    expect(executions.rows).toEqual([
      { entity_id: 'B-entity', revision: 1, size: tradeData().size },
      { entity_id: '_z-entity', revision: 2, size: '7' },
    ]);
  });
});
