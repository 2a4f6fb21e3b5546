// The leanest correct commit of a checkpoint, the anchor the commit benches and the minimal consumer share: ONE
// prepared, fenced statement — `UPDATE checkpoint … RETURNING` feeding `unnest … ON CONFLICT` inserts of receipts
// and effects — in autocommit, on tables of its own beside the consumer's.
import type pg from 'pg';
import { contentHashArray } from '../db/content-hash-column.js';

/**
 * The lean tables: receipts (dedup), effects (one row per entity, latest revision) and the fenced checkpoint. Their
 * keys compare bytes, and their content hashes are stored as bytes, as the consumer's are (migrations 0008 and 0009),
 * so that the anchor is no slower for want of either.
 */
export const LEAN_SCHEMA = `
  CREATE TABLE lean_receipts (consumer_id text COLLATE "C", event_id text COLLATE "C", content_hash bytea,
                              position bigint, ordinal int, PRIMARY KEY (consumer_id, event_id));
  CREATE TABLE lean_effects (consumer_id text COLLATE "C", entity_id text COLLATE "C", revision int, market text,
                             price numeric, size numeric, notional numeric, PRIMARY KEY (consumer_id, entity_id));
  CREATE TABLE lean_checkpoint (consumer_id text COLLATE "C" PRIMARY KEY, position bigint, token text, version int);`;

/** A consumer's checkpoint row at version 0: what the first fenced commit moves. */
export async function createLeanTables(pool: pg.Pool, consumerIds: readonly string[]): Promise<void> {
  await pool.query(LEAN_SCHEMA);
  await pool.query(`INSERT INTO lean_checkpoint SELECT id, 0, '', 0 FROM unnest($1::text[]) AS id`, [consumerIds]);
}

const LEAN_SQL = `
WITH cp AS (
  UPDATE lean_checkpoint SET position = $2, token = $3, version = version + 1
   WHERE consumer_id = $1 AND version = $4 RETURNING version
),
r AS (
  INSERT INTO lean_receipts SELECT $1, * FROM unnest($5::text[], $6::bytea[], $7::bigint[], $8::int[])
   WHERE EXISTS (SELECT 1 FROM cp) ON CONFLICT DO NOTHING
),
e AS (
  INSERT INTO lean_effects SELECT $1, id, rev, market, price, size, price * size
    FROM unnest($9::text[], $10::int[], $11::text[], $12::numeric[], $13::numeric[]) AS t(id, rev, market, price, size)
   WHERE EXISTS (SELECT 1 FROM cp)
  ON CONFLICT (consumer_id, entity_id) DO UPDATE
     SET revision = EXCLUDED.revision, market = EXCLUDED.market, price = EXCLUDED.price, size = EXCLUDED.size,
         notional = EXCLUDED.notional
   WHERE lean_effects.revision < EXCLUDED.revision
)
SELECT version FROM cp`;

/**
 * A checkpoint's events as the statement's parameter arrays: a receipt per event (eventIds … ordinals) and an
 * effect per entity (entityIds … sizes, its latest revision: ON CONFLICT DO UPDATE may touch a row once).
 */
export interface LeanColumns {
  eventIds: string[];
  contentHashes: string[];
  positions: number[];
  ordinals: number[];
  entityIds: string[];
  revisions: number[];
  markets: string[];
  prices: string[];
  sizes: string[];
}

export function emptyLeanColumns(): LeanColumns {
  return {
    eventIds: [],
    contentHashes: [],
    positions: [],
    ordinals: [],
    entityIds: [],
    revisions: [],
    markets: [],
    prices: [],
    sizes: [],
  };
}

/**
 * Commits `columns` and moves `consumerId`'s checkpoint to `position`/`token` if its version is still `version`;
 * resolves with the new version. A fenced-out commit writes nothing and throws.
 */
export async function leanCommit(
  pool: pg.Pool,
  consumerId: string,
  checkpoint: { position: number; token: string; version: number },
  c: LeanColumns,
): Promise<number> {
  const res = await pool.query<{ version: number }>({
    name: 'lean_commit',
    text: LEAN_SQL,
    values: [
      consumerId,
      checkpoint.position,
      checkpoint.token,
      checkpoint.version,
      c.eventIds,
      contentHashArray(c.contentHashes),
      c.positions,
      c.ordinals,
      c.entityIds,
      c.revisions,
      c.markets,
      c.prices,
      c.sizes,
    ],
  });
  if (res.rows.length !== 1) throw new Error(`lean commit of ${consumerId} fenced at version ${checkpoint.version}`);
  return res.rows[0]!.version;
}
