// Migration 0009 (content hashes stored as bytes) on a database an older release filled: receipts and quarantine
// records saved with current and legacy hashes as text keep them, byte for byte of the digest; the consumer then
// meets its saved events as it did before the upgrade (the same content is a duplicate, other content a conflict,
// a legacy hash compared at its own position), and commits on. A row of neither form stops the migration, naming it,
// and leaves the database as it was.
import { describe, expect, it } from 'vitest';
import { committed, makePlan, trade } from '../../bench/fixtures.js';
import { contentHashOf } from '../../db/content-hash-column.js';
import { acquireLease, commitCheckpoint, migrate } from '../../db/index.js';
import { legacyEventContentHash } from '../../protocol/canonical.js';
import { useTestDatabase } from '../support/db.js';
import { migrateBefore } from '../support/migrations.js';

const db = useTestDatabase({ migrated: false });
/** A database of its own for the migration that stops. */
const refusing = useTestDatabase({ migrated: false });

const CONSUMER = 'older';
/** Saved by the older release: one under the current identity, one under the legacy one. */
const current = trade(1, 'e-1', {}, { eventId: 'ev-current', ordinal: 1 });
const legacy = trade(1, 'e-2', {}, { eventId: 'ev-legacy', ordinal: 2 });
const legacyHash = legacyEventContentHash(legacy, legacy.position, legacy.ordinal);
const quarantined = trade(1, 'e-3', {}, { eventId: 'ev-held', ordinal: 3 });

async function fillAsOlderRelease(): Promise<void> {
  await migrateBefore(db.pool, '0009');
  await acquireLease(db.pool, CONSUMER);
  // The checkpoint row as the older release's last commit left it, at position 1.
  await db.pool.query(
    `UPDATE checkpoints SET position = 1, token = 't1', generation = 1, version = version + 1
                        WHERE consumer_id = $1`,
    [CONSUMER],
  );
  await db.pool.query(
    `INSERT INTO event_receipts (consumer_id, event_id, content_hash, position, ordinal, outcome)
     VALUES ($1, $2, $3, 1, 1, 'applied'), ($1, $4, $5, 1, 2, 'applied')`,
    [CONSUMER, current.eventId, current.contentHash, legacy.eventId, legacyHash],
  );
  await db.pool.query(
    `INSERT INTO quarantine (consumer_id, event_id, entity_id, kind, position, ordinal, content_hash, reason, disposition)
     VALUES ($1, $2, 'e-3', 'trade', 1, 3, $3, 'unknown_correction_target', 'terminal')`,
    [CONSUMER, quarantined.eventId, quarantined.contentHash],
  );
}

async function savedHashes(table: 'event_receipts' | 'quarantine'): Promise<Record<string, string>> {
  const { rows } = await db.pool.query<{ event_id: string; content_hash: Buffer }>(
    `SELECT event_id, content_hash FROM ${table} WHERE consumer_id = $1`,
    [CONSUMER],
  );
  return Object.fromEntries(rows.map((r) => [r.event_id, contentHashOf(r.content_hash)]));
}

describe('migration 0009_content_hash_bytea', () => {
  it('keeps every saved hash, and the consumer meets its saved events as before', async () => {
    await fillAsOlderRelease();
    await migrate(db.pool);

    expect(await savedHashes('event_receipts')).toEqual({
      [current.eventId]: current.contentHash,
      [legacy.eventId]: legacyHash,
    });
    expect(await savedHashes('quarantine')).toEqual({ [quarantined.eventId]: quarantined.contentHash });
    const types = await db.pool.query<{ table_name: string; data_type: string }>(
      `SELECT table_name, data_type FROM information_schema.columns
        WHERE column_name = 'content_hash' AND table_schema = 'public' ORDER BY table_name`,
    );
    expect(types.rows).toEqual([
      { table_name: 'event_receipts', data_type: 'bytea' },
      { table_name: 'quarantine', data_type: 'bytea' },
    ]);

    // Both saved events redelivered at another position, unchanged: duplicates (the legacy one compared at its
    // own position and ordinal); the current one with other content: a conflict; and a new trade applies.
    const { rows } = await db.pool.query<{ lease_epoch: number; version: number }>(
      'SELECT lease_epoch, version FROM checkpoints WHERE consumer_id = $1',
      [CONSUMER],
    );
    const fence = { leaseEpoch: rows[0]!.lease_epoch, version: rows[0]!.version };
    const again = committed(
      await commitCheckpoint(
        db.pool,
        makePlan(CONSUMER, {
          fence,
          position: 2,
          events: [
            trade(2, 'e-1', {}, { eventId: 'ev-current', ordinal: 1 }),
            trade(2, 'e-2', {}, { eventId: 'ev-legacy', ordinal: 2 }),
            trade(2, 'e-4', {}, { eventId: 'ev-new', ordinal: 3 }),
          ],
        }),
      ),
    );
    expect(again).toMatchObject({ applied: 1, duplicates: 2 });
    const conflict = await commitCheckpoint(
      db.pool,
      makePlan(CONSUMER, {
        fence: { ...fence, version: again.version },
        position: 3,
        events: [trade(3, 'e-1', { size: '999' }, { eventId: 'ev-current', ordinal: 1 })],
      }),
    );
    expect(conflict).toMatchObject({ kind: 'conflict', eventId: 'ev-current', savedHash: current.contentHash });
  });

  it('stops at a hash of neither form, naming its table and event, and leaves the text column as it was', async () => {
    await migrateBefore(refusing.pool, '0009');
    await acquireLease(refusing.pool, CONSUMER);
    await refusing.pool.query(
      `INSERT INTO event_receipts (consumer_id, event_id, content_hash, position, ordinal, outcome)
       VALUES ($1, 'ev-fine', $2, 1, 1, 'applied'), ($1, 'ev-odd', 'sha256:abc', 1, 2, 'applied')`,
      [CONSUMER, current.contentHash],
    );
    // The database's own error (data_exception), not the whole migration's text.
    await expect(migrate(refusing.pool)).rejects.toMatchObject({
      code: 'storage_failure',
      sqlState: '22000',
      message: expect.stringMatching(
        /^migrate failed \(SQLSTATE 22000\): content_hash of event_receipts \(consumer older, event ev-odd\) is not a content hash: sha256:abc$/,
      ) as unknown,
    });
    const { rows } = await refusing.pool.query<{ data_type: string; hashes: string[] }>(
      `SELECT (SELECT data_type FROM information_schema.columns
                WHERE table_name = 'event_receipts' AND column_name = 'content_hash') AS data_type,
              array_agg(content_hash ORDER BY event_id) AS hashes
         FROM event_receipts`,
    );
    expect(rows[0]).toEqual({ data_type: 'text', hashes: [current.contentHash, 'sha256:abc'] });
  });
});
