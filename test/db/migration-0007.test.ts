// Migration 0007 (page applied totals) on a database that already holds page consumers: each starts its counter
// from its applied receipts, the count the handover took before, so a backfill that handed over after the upgrade
// carries the same total into its stream as one that handed over before it.
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { drizzle } from 'drizzle-orm/node-postgres';
import { migrate as drizzleMigrate } from 'drizzle-orm/node-postgres/migrator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate, MIGRATIONS_FOLDER } from '../../db/migrate.js';
import { handOverToStream } from '../../db/page-decisions.js';
import { createTestDatabase, type TestDatabase } from '../support/db.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase({ migrated: false });
});
afterAll(async () => {
  await db.drop();
});

/** The migrations folder as it was before 0007: the same files, the journal cut after 0006. */
function folderBefore0007(): string {
  const dir = mkdtempSync(join(tmpdir(), 'whalehunt-migrations-0006-'));
  cpSync(MIGRATIONS_FOLDER, dir, { recursive: true });
  const journalPath = join(dir, 'meta', '_journal.json');
  const journal = JSON.parse(readFileSync(journalPath, 'utf8')) as { entries: { tag: string }[] };
  journal.entries = journal.entries.filter((entry) => entry.tag < '0007');
  writeFileSync(journalPath, JSON.stringify(journal));
  return dir;
}

describe('migration 0007_page_applied_totals', () => {
  it('starts each page consumer from its applied receipts, and the handover carries that total on', async () => {
    const before = folderBefore0007();
    try {
      await drizzleMigrate(drizzle(db.pool), { migrationsFolder: before });
    } finally {
      rmSync(before, { recursive: true, force: true });
    }
    await db.pool.query(
      `INSERT INTO page_progress (consumer_id, stream, filter, filter_hash, applied_position, version)
       VALUES ('backfilled', 'polymarket', '{}', 'h', 5, 3), ('fresh', 'polymarket', '{}', 'h', 0, 0)`,
    );
    // Three applied, one no-effect and one quarantined receipt; another consumer's applied one counts for it alone.
    await db.pool.query(
      `INSERT INTO event_receipts (consumer_id, event_id, content_hash, position, ordinal, outcome)
       VALUES ('backfilled', 'e1', 'v2:a', 1, 0, 'applied'), ('backfilled', 'e2', 'v2:b', 2, 0, 'applied'),
              ('backfilled', 'e3', 'v2:c', 3, 0, 'no_effect'), ('backfilled', 'e4', 'v2:d', 4, 0, 'quarantined'),
              ('backfilled', 'e5', 'v2:e', 5, 0, 'applied'), ('other', 'e1', 'v2:a', 1, 0, 'applied')`,
    );

    await migrate(db.pool);
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
