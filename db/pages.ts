// Durable progress of the paginated history source (docs/protocol.md §8). Two kinds of progress per consumer:
// `applied_position` (end of the complete durable prefix) moves with every chunk of a page, in the chunk's
// transaction; `resume_cursor` moves only once every event of the page has a durable outcome, by one
// compare-and-swap. Both are fenced on `version`. A chunk is read → decideCommit → the stream's shared effect
// write (EFFECT_WRITE_CTES) plus this table's row, in one statement: the same rules, none of the SQL twice.
import type pg from 'pg';
import { filterHash as computeFilterHash, sameContent } from '../protocol/canonical.js';
import type { StreamFilter } from '../protocol/codec.js';
import { decideCommit, type CommitWrites } from '../domain/decide.js';
import { InvalidPlan } from '../domain/errors.js';
import { commitHeld, type CommitConflict, type CommitHeld } from '../domain/outcomes.js';
import type { ActionRules, QuarantinePolicy, StagedEvent } from '../protocol/types.js';
import { readExisting, writeQuarantine } from './commit.js';
import { EFFECT_PARAM_COUNT, EFFECT_WRITE_CTES, effectWriteValues } from './commit-sql.js';
import type { RawRow } from './rows.js';
import type { pageProgress } from './schema.js';
import { lockConsumerKind } from './state.js';
import { inTransaction, SQLSTATE, sqlStateOf, toStorageFailure } from './transaction.js';

export interface PageProgress {
  consumerId: string;
  stream: string;
  filter: StreamFilter;
  filterHash: string;
  historyId: string | null;
  /** null: the first page starts at the retention floor. */
  resumeCursor: string | null;
  appliedPosition: number;
  version: number;
}

type ProgressRow = Pick<
  RawRow<typeof pageProgress>,
  'consumer_id' | 'stream' | 'filter' | 'filter_hash' | 'history_id' | 'resume_cursor' | 'applied_position' | 'version'
>;

const PROGRESS_COLUMNS =
  'consumer_id, stream, filter, filter_hash, history_id, resume_cursor, applied_position, version';

function toProgress(row: ProgressRow): PageProgress {
  return {
    consumerId: row.consumer_id,
    stream: row.stream,
    filter: row.filter,
    filterHash: row.filter_hash,
    historyId: row.history_id,
    resumeCursor: row.resume_cursor,
    appliedPosition: Number(row.applied_position),
    version: row.version,
  };
}

/**
 * The events a page consumer's chunks have applied (migration 0007's counter): null when it has no page progress,
 * or when the database predates the counter (its worker migrates it when it next starts), so that a status read
 * never fails for it.
 */
export async function loadPageEventsApplied(pool: pg.Pool, consumerId: string): Promise<number | null> {
  try {
    const res = await pool.query<{ events_applied: string }>(
      'SELECT events_applied FROM page_progress WHERE consumer_id = $1',
      [consumerId],
    );
    return res.rows[0] ? Number(res.rows[0].events_applied) : null;
  } catch (error) {
    if (sqlStateOf(error) === SQLSTATE.undefinedColumn) return null;
    throw toStorageFailure('loadPageEventsApplied', consumerId, error);
  }
}

export async function loadPageProgress(pool: pg.Pool, consumerId: string): Promise<PageProgress | null> {
  try {
    const res = await pool.query<ProgressRow>(`SELECT ${PROGRESS_COLUMNS} FROM page_progress WHERE consumer_id = $1`, [
      consumerId,
    ]);
    return res.rows[0] ? toProgress(res.rows[0]) : null;
  } catch (error) {
    throw toStorageFailure('loadPageProgress', consumerId, error);
  }
}

export type OpenPageProgress =
  { kind: 'opened'; progress: PageProgress } | { kind: 'mismatch'; reason: string; progress: PageProgress | null };

/**
 * Loads a page consumer's progress, creating it (no cursor, nothing applied) on first use. A consumer's stream
 * and filter are fixed with its cursor (the source binds cursors to the filter): a different one is a mismatch,
 * as is an id that belongs to a stream consumer (their effects would share rows under two different locks).
 */
export async function openPageProgress(
  pool: pg.Pool,
  binding: { consumerId: string; stream: string; filter: StreamFilter },
): Promise<OpenPageProgress> {
  const { consumerId, stream, filter } = binding;
  const hash = computeFilterHash(filter);
  return inTransaction(pool, 'openPageProgress', consumerId, async (client): Promise<OpenPageProgress> => {
    await lockConsumerKind(client, consumerId);
    const streamConsumer = await client.query('SELECT 1 FROM checkpoints WHERE consumer_id = $1', [consumerId]);
    if (streamConsumer.rowCount)
      return {
        kind: 'mismatch',
        reason: `consumer ${consumerId} is a stream consumer, not a page consumer`,
        progress: null,
      };
    const inserted = await client.query<ProgressRow>(
      `INSERT INTO page_progress (consumer_id, stream, filter, filter_hash) VALUES ($1, $2, $3::jsonb, $4)
       ON CONFLICT (consumer_id) DO NOTHING
       RETURNING ${PROGRESS_COLUMNS}`,
      [consumerId, stream, JSON.stringify(filter), hash],
    );
    const row =
      inserted.rows[0] ??
      (
        await client.query<ProgressRow>(`SELECT ${PROGRESS_COLUMNS} FROM page_progress WHERE consumer_id = $1`, [
          consumerId,
        ])
      ).rows[0]!;
    const progress = toProgress(row);
    if (progress.stream !== stream || progress.filterHash !== hash) {
      return {
        kind: 'mismatch',
        reason: `page consumer ${consumerId} is bound to stream ${progress.stream} with filter ${progress.filterHash}; asked for ${stream} with ${hash}`,
        progress,
      };
    }
    return { kind: 'opened', progress };
  });
}

/** An event at or below the applied position, checked against its receipt. */
export type Recognition =
  | { kind: 'recognised'; count: number }
  | { kind: 'conflict'; eventId: string; savedHash: string; incomingHash: string }
  /** No receipt although the prefix claims a durable outcome: the source rewrote its past, or served another filter. */
  | { kind: 'unrecognised'; eventId: string; position: number };

/**
 * Checks events of the durable prefix against their receipts. Receipts are never updated once written, so this
 * read needs no lock.
 */
export async function recognisePageEvents(
  pool: pg.Pool,
  consumerId: string,
  events: readonly StagedEvent[],
): Promise<Recognition> {
  let client: pg.PoolClient;
  try {
    client = await pool.connect();
  } catch (error) {
    throw toStorageFailure('recognisePageEvents', consumerId, error);
  }
  try {
    const { receipts } = await readExisting(client, consumerId, events);
    for (const event of events) {
      const receipt = receipts.get(event.eventId);
      if (!receipt) return { kind: 'unrecognised', eventId: event.eventId, position: event.position };
      if (!sameContent(receipt, event)) {
        return {
          kind: 'conflict',
          eventId: event.eventId,
          savedHash: receipt.contentHash,
          incomingHash: event.contentHash,
        };
      }
    }
    return { kind: 'recognised', count: events.length };
  } catch (error) {
    throw toStorageFailure('recognisePageEvents', consumerId, error);
  } finally {
    client.release();
  }
}

export interface PageChunk {
  consumerId: string;
  /** The version this attempt holds: the chunk commits only if it is still the saved one. */
  expectedVersion: number;
  /** Journal order, every position whole, all above the saved applied position. */
  events: StagedEvent[];
  quarantinePolicy: QuarantinePolicy;
  actions: ActionRules;
}

export type ChunkCounts = CommitWrites['counts'];

/** The same answers as a checkpoint's commit (CheckpointOutcome), with the page progress's own fence. */
export type ChunkResult =
  | { kind: 'committed'; version: number; appliedPosition: number; counts: ChunkCounts; outboxed: number }
  /** Another attempt moved the progress: nothing written. */
  | { kind: 'fenced'; actualVersion: number | null }
  | CommitConflict
  | CommitHeld;

/** Parameters after the effects: the applied position, the expected version, then the events applied. */
const CHUNK_WRITE_SQL = `${EFFECT_WRITE_CTES}progress AS (
  UPDATE page_progress
     SET applied_position = $${EFFECT_PARAM_COUNT + 1}, version = version + 1, updated_at = now(),
         events_applied = events_applied + $${EFFECT_PARAM_COUNT + 3}
   WHERE consumer_id = $1 AND version = $${EFFECT_PARAM_COUNT + 2}
  RETURNING version
)
SELECT (SELECT version FROM progress) AS version, (SELECT count(*) FROM outboxed)::int AS outboxed`;

/** Locks the progress row: every chunk and cursor swap of a consumer serialises here. */
async function lockProgress(
  client: pg.PoolClient,
  consumerId: string,
): Promise<{ version: number; appliedPosition: number } | null> {
  const res = await client.query<{ version: number; applied_position: string }>(
    'SELECT version, applied_position FROM page_progress WHERE consumer_id = $1 FOR UPDATE',
    [consumerId],
  );
  const row = res.rows[0];
  return row ? { version: row.version, appliedPosition: Number(row.applied_position) } : null;
}

/**
 * Gives every event of the chunk a durable outcome and moves applied_position to the chunk's last position, in
 * one transaction fenced on the version. The cursor does not move. Throws InvalidPlan (nothing written) and
 * StorageFailure.
 */
export async function commitPageChunk(pool: pg.Pool, chunk: PageChunk): Promise<ChunkResult> {
  const { consumerId, events } = chunk;
  const last = events.at(-1);
  if (!last) throw new RangeError('a page chunk holds at least one event');
  return inTransaction(pool, 'commitPageChunk', consumerId, async (client): Promise<ChunkResult> => {
    const saved = await lockProgress(client, consumerId);
    if (!saved || saved.version !== chunk.expectedVersion)
      return { kind: 'fenced', actualVersion: saved?.version ?? null };
    const first = events[0]!;
    if (first.position <= saved.appliedPosition) {
      throw new InvalidPlan(
        `page chunk starts at ${first.position}, inside the durable prefix ending at ${saved.appliedPosition}`,
      );
    }
    const existing = await readExisting(client, consumerId, events);
    const decision = decideCommit({ ...chunk, qualityNotices: [] }, existing);
    if (decision.kind === 'conflict') return decision;
    if (decision.kind === 'held_quarantine') {
      // As in commitCheckpoint: nothing of the chunk is written, only the held records, under the fence.
      await writeQuarantine(client, consumerId, decision.held);
      return commitHeld(decision.held);
    }
    const res = await client.query<{ version: number; outboxed: number }>({
      name: 'whalehunt_page_chunk_write',
      text: CHUNK_WRITE_SQL,
      values: [
        ...effectWriteValues(consumerId, decision.writes, last.position, existing.executions),
        last.position,
        chunk.expectedVersion,
        decision.writes.counts.applied,
      ],
    });
    const row = res.rows[0]!;
    return {
      kind: 'committed',
      version: row.version,
      appliedPosition: last.position,
      counts: decision.writes.counts,
      outboxed: row.outboxed,
    };
  });
}

export type CursorSwap = { kind: 'swapped'; version: number } | { kind: 'fenced'; actualVersion: number | null };

/**
 * The one compare-and-swap that replaces the cursor after every event of its page has a durable outcome. It
 * also saves the history the cursor belongs to.
 */
export async function swapPageCursor(
  pool: pg.Pool,
  swap: { consumerId: string; expectedVersion: number; next: string; historyId: string },
): Promise<CursorSwap> {
  try {
    const res = await pool.query<{ version: number }>(
      `UPDATE page_progress SET resume_cursor = $3, history_id = $4, version = version + 1, updated_at = now()
        WHERE consumer_id = $1 AND version = $2
       RETURNING version`,
      [swap.consumerId, swap.expectedVersion, swap.next, swap.historyId],
    );
    if (res.rows[0]) return { kind: 'swapped', version: res.rows[0].version };
    const now = await pool.query<{ version: number }>('SELECT version FROM page_progress WHERE consumer_id = $1', [
      swap.consumerId,
    ]);
    return { kind: 'fenced', actualVersion: now.rows[0]?.version ?? null };
  } catch (error) {
    throw toStorageFailure('swapPageCursor', swap.consumerId, error);
  }
}
