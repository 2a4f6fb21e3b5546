// Migration 0007 (page applied totals) on a database that already holds page consumers: each starts its counter
// from its applied receipts, the count the handover took before, so a backfill that handed over after the upgrade
// carries the same total into its stream as one that handed over before it.
import { describe, expect, it } from 'vitest';
import { migrate } from '../../db/migrate.js';
import { handOverToStream } from '../../db/page-decisions.js';
import { loadPageEventsApplied } from '../../db/pages.js';
import { useTestDatabase } from '../support/db.js';
import { migrateBefore } from '../support/migrations.js';

const db = useTestDatabase({ migrated: false });

describe('migration 0007_page_applied_totals', () => {
  it('starts each page consumer from its applied receipts, and the handover carries that total on', async () => {
    await migrateBefore(db.pool, '0007');
    await db.pool.query(
      `INSERT INTO page_progress (consumer_id, stream, filter, filter_hash, applied_position, version)
       VALUES ('backfilled', 'polymarket', '{}', 'h', 5, 3), ('fresh', 'polymarket', '{}', 'h', 0, 0)`,
    );
    // Three applied, one no-effect and one quarantined receipt; another consumer's applied one counts for it alone.
    await db.pool.query(
      `INSERT INTO event_receipts (consumer_id, event_id, content_hash, position, ordinal, outcome)
       SELECT consumer_id, event_id, 'v2:' || repeat(digit, 64), position, 0, outcome
         FROM (VALUES ('backfilled', 'e1', 'a', 1, 'applied'), ('backfilled', 'e2', 'b', 2, 'applied'),
                      ('backfilled', 'e3', 'c', 3, 'no_effect'), ('backfilled', 'e4', 'd', 4, 'quarantined'),
                      ('backfilled', 'e5', 'e', 5, 'applied'), ('other', 'e1', 'a', 1, 'applied'))
              AS r(consumer_id, event_id, digit, position, outcome)`,
    );

    // A status read before the worker has migrated shows no counter rather than failing.
    expect(await loadPageEventsApplied(db.pool, 'backfilled')).toBeNull();

    await migrate(db.pool);
    expect(await loadPageEventsApplied(db.pool, 'backfilled')).toBe(3);
    expect(await loadPageEventsApplied(db.pool, 'never-ran')).toBeNull();
    const totals = await db.pool.query<{ consumer_id: string; events_applied: string }>(
      'SELECT consumer_id, events_applied FROM page_progress ORDER BY consumer_id',
    );
    expect(totals.rows).toEqual([
      { consumer_id: 'backfilled', events_applied: '3' },
      { consumer_id: 'fresh', events_applied: '0' },
    ]);

    expect(await handOverToStream(db.pool, { consumerId: 'backfilled', expectedVersion: 3 })).toEqual({
      kind: 'handed_over',
      appliedPosition: 5,
    });
    const stream = await db.pool.query<{ events_applied: string }>(
      `SELECT events_applied FROM checkpoints WHERE consumer_id = 'backfilled'`,
    );
    expect(stream.rows).toEqual([{ events_applied: '3' }]);
  });
});
