// Retention: what a consumer may forget, and the maintenance run that forgets it without stalling a commit.
// The argument for each table is in docs/design.md#retention. In short: a receipt below its source's retention floor
// can never be redelivered by that history (resume, rebind and from_floor all start at or above the floor); a
// rebuilt history that meets an event again is still recognised by the execution's revision, which is never
// removed. Finished outbox rows and superseded revisions go after a configured age.
//
// Every removal is a small autocommit statement under short server-side bounds, so a commit that needs a row a
// removal holds (a rebuilt history reinserting a receipt key, a redelivered alert key) waits at most one bounded
// statement, well inside its own lock timeout. Whole-partition drops were rejected: the receipts' key is the event
// id, which a position-partitioned table cannot keep unique across partitions, and detaching a partition takes a
// lock on the parent that every commit would wait behind.
import type pg from 'pg';
import { SQLSTATE, toStorageFailure } from './transaction.js';

export interface RetentionPolicy {
  /** Finished outbox rows (done, suppressed, dropped) older than this many days are removed; null keeps them. */
  outboxDays: number | null;
  /** Superseded revisions older than this many days are removed; null keeps them all. */
  revisionDays: number | null;
  /** Rows one removal statement aims at (it adapts its window to the rows it meets). */
  batchRows: number;
  /** The server-side bound on one removal statement (statement_timeout); a lock wait gets a quarter of it. */
  statementTimeoutMs: number;
}

/**
 * Finished alerts are kept 30 days (an operator's look back at what was sent); superseded revisions are the
 * corrections' audit trail and are kept unless a policy says otherwise. One statement is bounded by 1 s: a commit
 * waits on it at most that long, a third of a commit's own lock timeout (db/session-settings.ts).
 */
export const DEFAULT_RETENTION_POLICY: RetentionPolicy = {
  outboxDays: 30,
  revisionDays: null,
  batchRows: 5_000,
  statementTimeoutMs: 1_000,
};

/** The tables maintenance reports on: a consumer's durable state. */
export const CONSUMER_TABLES = [
  'event_receipts',
  'executions',
  'execution_revisions',
  'outbox',
  'quarantine',
  'market_volumes',
  'source_quality',
  'decisions',
  'checkpoints',
] as const;

export interface ConsumerPruning {
  consumerId: string;
  historyId: string;
  floor: number;
  /** Receipts below this position are gone (after this run). */
  prunedBelow: number;
  receiptsDeleted: number;
  /** Why nothing was removed for this consumer, when nothing could be. */
  skipped?: 'history_not_bound' | 'nothing_below_floor';
}

export interface MaintenanceReport {
  runId: number;
  startedAt: string;
  finishedAt: string;
  receiptsDeleted: number;
  outboxDeleted: number;
  revisionsDeleted: number;
  consumers: ConsumerPruning[];
}

export interface MaintenanceProgress {
  stage: 'receipts' | 'outbox' | 'revisions';
  consumerId?: string;
  receiptsDeleted: number;
  outboxDeleted: number;
  revisionsDeleted: number;
}

export interface MaintenanceOptions {
  /** Told after every removal statement (the activity heartbeats it). */
  onProgress?(progress: MaintenanceProgress): void;
  /** Stops between statements; the run is recorded as failed and the next one goes on from where it stopped. */
  signal?: AbortSignal;
}

export interface MaintenanceRunRow {
  id: number;
  startedAt: string;
  finishedAt: string | null;
  status: 'running' | 'succeeded' | 'failed';
  receiptsDeleted: number;
  outboxDeleted: number;
  revisionsDeleted: number;
  error: string | null;
}

export interface TableSize {
  table: string;
  /** The planner's estimate (pg_class.reltuples); null before the table was first analysed. */
  rows: number | null;
  tableBytes: number;
  indexBytes: number;
}

/**
 * Records the retention floor a session's `hello` (or a page) announced. Within one history the floor only rises;
 * a different history replaces the row and starts its pruning over, since positions of two histories do not compare.
 */
export async function recordRetentionFloor(
  pool: pg.Pool,
  consumerId: string,
  history: { id: string; floor: number },
): Promise<void> {
  try {
    await pool.query(
      `INSERT INTO retention_floors (consumer_id, history_id, floor) VALUES ($1, $2, $3)
       ON CONFLICT (consumer_id) DO UPDATE SET
         floor = CASE WHEN retention_floors.history_id = EXCLUDED.history_id
                      THEN GREATEST(retention_floors.floor, EXCLUDED.floor) ELSE EXCLUDED.floor END,
         pruned_below = CASE WHEN retention_floors.history_id = EXCLUDED.history_id
                             THEN retention_floors.pruned_below ELSE 0 END,
         history_id = EXCLUDED.history_id,
         observed_at = now()
       WHERE retention_floors.history_id <> EXCLUDED.history_id OR retention_floors.floor < EXCLUDED.floor`,
      [consumerId, history.id, history.floor],
    );
  } catch (error) {
    throw toStorageFailure('recordRetentionFloor', consumerId, error);
  }
}

/**
 * One maintenance run over the whole database: receipts below each consumer's floor, then finished outbox rows and
 * superseded revisions past their age. Idempotent: a second run finds nothing more to remove. Recorded in
 * maintenance_runs, failed or not.
 */
export async function runMaintenance(
  pool: pg.Pool,
  policy: RetentionPolicy,
  options: MaintenanceOptions = {},
): Promise<MaintenanceReport> {
  const client = await connectBounded(pool, policy);
  const totals: MaintenanceProgress = { stage: 'receipts', receiptsDeleted: 0, outboxDeleted: 0, revisionsDeleted: 0 };
  const consumers: ConsumerPruning[] = [];
  let runId: number | null = null;
  try {
    const started = await client.query<{ id: string; started_at: Date }>(
      `INSERT INTO maintenance_runs DEFAULT VALUES RETURNING id, started_at`,
    );
    runId = Number(started.rows[0]?.id);
    await summarizeNewRanges(client, policy);
    for (const floor of await loadFloors(client)) {
      consumers.push(await pruneReceipts(client, floor, policy, totals, options));
    }
    if (policy.outboxDays !== null) await pruneOutbox(client, policy.outboxDays, policy, totals, options);
    if (policy.revisionDays !== null) await pruneRevisions(client, policy.revisionDays, policy, totals, options);
    const finished = await client.query<{ finished_at: Date }>(
      `UPDATE maintenance_runs SET status = 'succeeded', finished_at = now(), receipts_deleted = $2,
              outbox_deleted = $3, revisions_deleted = $4, details = $5
        WHERE id = $1 RETURNING finished_at`,
      [runId, totals.receiptsDeleted, totals.outboxDeleted, totals.revisionsDeleted, JSON.stringify(consumers)],
    );
    return {
      runId,
      startedAt: (started.rows[0]?.started_at as Date).toISOString(),
      finishedAt: (finished.rows[0]?.finished_at as Date).toISOString(),
      receiptsDeleted: totals.receiptsDeleted,
      outboxDeleted: totals.outboxDeleted,
      revisionsDeleted: totals.revisionsDeleted,
      consumers,
    };
  } catch (error) {
    // A run stopped on purpose (the worker shutting down) says so; anything else is the database's failure.
    const failure = options.signal?.aborted ? error : toStorageFailure('runMaintenance', undefined, error);
    if (runId === null) throw failure;
    await client
      .query(
        `UPDATE maintenance_runs SET status = 'failed', finished_at = now(), receipts_deleted = $2,
                outbox_deleted = $3, revisions_deleted = $4, details = $5, error = $6 WHERE id = $1`,
        [
          runId,
          totals.receiptsDeleted,
          totals.outboxDeleted,
          totals.revisionsDeleted,
          JSON.stringify(consumers),
          failure instanceof Error ? failure.message : String(failure),
        ],
      )
      .catch(() => undefined);
    throw failure;
  } finally {
    // The bounds were set on this session only: a pooled client goes back without them.
    await client.query('RESET ALL').then(
      () => client.release(),
      (error: unknown) => client.release(error instanceof Error ? error : true),
    );
  }
}

/** The last maintenance run, or null when none has run. */
export async function lastMaintenanceRun(pool: pg.Pool): Promise<MaintenanceRunRow | null> {
  try {
    const res = await pool.query<{
      id: string;
      started_at: Date;
      finished_at: Date | null;
      status: MaintenanceRunRow['status'];
      receipts_deleted: string;
      outbox_deleted: string;
      revisions_deleted: string;
      error: string | null;
    }>(
      `SELECT id, started_at, finished_at, status, receipts_deleted, outbox_deleted, revisions_deleted, error
         FROM maintenance_runs ORDER BY id DESC LIMIT 1`,
    );
    const row = res.rows[0];
    if (!row) return null;
    return {
      id: Number(row.id),
      startedAt: row.started_at.toISOString(),
      finishedAt: row.finished_at?.toISOString() ?? null,
      status: row.status,
      receiptsDeleted: Number(row.receipts_deleted),
      outboxDeleted: Number(row.outbox_deleted),
      revisionsDeleted: Number(row.revisions_deleted),
      error: row.error,
    };
  } catch (error) {
    throw toStorageFailure('lastMaintenanceRun', undefined, error);
  }
}

/** Sizes of the consumer tables on disk (table with TOAST, and its indexes), from the catalogue: no table scan. */
export async function tableSizes(pool: pg.Pool): Promise<TableSize[]> {
  try {
    const res = await pool.query<{ table: string; rows: string; table_bytes: string; index_bytes: string }>(
      `SELECT c.relname AS table, c.reltuples::bigint AS rows,
              pg_table_size(c.oid) AS table_bytes, pg_indexes_size(c.oid) AS index_bytes
         FROM pg_class c
        WHERE c.oid = ANY (SELECT to_regclass(name) FROM unnest($1::text[]) AS name)
        ORDER BY array_position($1::text[], c.relname::text)`,
      [CONSUMER_TABLES],
    );
    return res.rows.map((row) => ({
      table: row.table,
      rows: Number(row.rows) < 0 ? null : Number(row.rows),
      tableBytes: Number(row.table_bytes),
      indexBytes: Number(row.index_bytes),
    }));
  } catch (error) {
    throw toStorageFailure('tableSizes', undefined, error);
  }
}

/**
 * Summarises the BRIN ranges filled since autovacuum last did: an unsummarised range is read by every removal's scan.
 * It takes only a lock autovacuum also takes (no commit waits on it), so it gets a bound of its own; when
 * autovacuum holds that lock it is doing the same work, and the run goes on without it.
 */
async function summarizeNewRanges(client: pg.PoolClient, policy: RetentionPolicy): Promise<void> {
  await client.query(`SELECT set_config('statement_timeout', $1, false)`, [String(SUMMARIZE_TIMEOUT_MS)]);
  try {
    await client.query(`SELECT brin_summarize_new_values('event_receipts_position_brin')`);
  } catch (error) {
    if ((error as { code?: unknown } | null)?.code !== SQLSTATE.lockNotAvailable) throw error;
  } finally {
    await client.query(`SELECT set_config('statement_timeout', $1, false)`, [String(policy.statementTimeoutMs)]);
  }
}

const SUMMARIZE_TIMEOUT_MS = 5 * 60_000;

async function connectBounded(pool: pg.Pool, policy: RetentionPolicy): Promise<pg.PoolClient> {
  const client = await pool.connect().catch((error: unknown) => {
    throw toStorageFailure('runMaintenance', undefined, error);
  });
  try {
    // Autocommit statements only: no transaction is ever left open between them.
    await client.query(`SELECT set_config('statement_timeout', $1, false), set_config('lock_timeout', $2, false)`, [
      String(policy.statementTimeoutMs),
      String(Math.max(1, Math.floor(policy.statementTimeoutMs / 4))),
    ]);
    return client;
  } catch (error) {
    client.release(error instanceof Error ? error : true);
    throw toStorageFailure('runMaintenance', undefined, error);
  }
}

interface FloorRow {
  consumerId: string;
  historyId: string;
  floor: number;
  prunedBelow: number;
  /** The history of the consumer's saved binding (stream) or cursor (backfill); null when it has none. */
  boundHistoryId: string | null;
}

async function loadFloors(client: pg.PoolClient): Promise<FloorRow[]> {
  const res = await client.query<{
    consumer_id: string;
    history_id: string;
    floor: string;
    pruned_below: string;
    bound_history_id: string | null;
  }>(
    `SELECT f.consumer_id, f.history_id, f.floor, f.pruned_below,
            COALESCE(b.history_id, p.history_id) AS bound_history_id
       FROM retention_floors f
       LEFT JOIN consumer_bindings b ON b.consumer_id = f.consumer_id
       LEFT JOIN page_progress p ON p.consumer_id = f.consumer_id
      ORDER BY f.consumer_id`,
  );
  return res.rows.map((row) => ({
    consumerId: row.consumer_id,
    historyId: row.history_id,
    floor: Number(row.floor),
    prunedBelow: Number(row.pruned_below),
    boundHistoryId: row.bound_history_id,
  }));
}

/**
 * Removes the consumer's receipts below its floor in position windows from where the last run stopped. Only when
 * the floor belongs to the history the consumer is bound to: a floor announced by a rebuilt history the operator
 * has not yet decided on says nothing about the saved positions. Quarantined events keep their receipts: their
 * quarantine rows are keyed by the same event, and they are few.
 */
async function pruneReceipts(
  client: pg.PoolClient,
  floor: FloorRow,
  policy: RetentionPolicy,
  totals: MaintenanceProgress,
  options: MaintenanceOptions,
): Promise<ConsumerPruning> {
  const result: ConsumerPruning = {
    consumerId: floor.consumerId,
    historyId: floor.historyId,
    floor: floor.floor,
    prunedBelow: floor.prunedBelow,
    receiptsDeleted: 0,
  };
  if (floor.boundHistoryId !== floor.historyId) return { ...result, skipped: 'history_not_bound' };
  if (floor.prunedBelow >= floor.floor) return { ...result, skipped: 'nothing_below_floor' };
  await removeInWindows({
    from: floor.prunedBelow,
    end: floor.floor,
    width: policy.batchRows,
    signal: options.signal,
    remove: async (from, to) => {
      const res = await client.query<{ deleted: number }>(
        `WITH gone AS (
           DELETE FROM event_receipts
            WHERE consumer_id = $1 AND position >= $2 AND position < $3 AND outcome <> 'quarantined'
           RETURNING 1
         ), moved AS (
           UPDATE retention_floors SET pruned_below = $3
            WHERE consumer_id = $1 AND history_id = $4 AND pruned_below < $3
         )
         SELECT count(*)::int AS deleted FROM gone`,
        [floor.consumerId, from, to, floor.historyId],
      );
      return { deleted: res.rows[0]?.deleted ?? 0 };
    },
    // Positions are sparse for a filtered consumer: widen over empty stretches, narrow where rows are dense.
    next: (width, deleted) =>
      deleted === 0 ? width * 2 : Math.max(1, Math.round((width * policy.batchRows) / deleted)),
    removed: (deleted, to) => {
      result.receiptsDeleted += deleted;
      totals.receiptsDeleted += deleted;
      result.prunedBelow = to;
      options.onProgress?.({ ...totals, stage: 'receipts', consumerId: floor.consumerId });
    },
  });
  return result;
}

/**
 * Finished alerts past their age, in id windows from the oldest: ids follow creation, so the run stops at the first
 * window holding a row younger than the age.
 */
async function pruneOutbox(
  client: pg.PoolClient,
  days: number,
  policy: RetentionPolicy,
  totals: MaintenanceProgress,
  options: MaintenanceOptions,
): Promise<void> {
  const bounds = await client.query<{ first: string | null; last: string | null }>(
    `SELECT min(id) AS first, max(id) AS last FROM outbox`,
  );
  const first = bounds.rows[0]?.first;
  const last = bounds.rows[0]?.last;
  if (first == null || last == null) return;
  await removeInWindows({
    from: Number(first),
    end: Number(last) + 1,
    width: policy.batchRows,
    signal: options.signal,
    remove: async (from, to) => {
      const res = await client.query<{ deleted: number; younger: boolean }>(
        `WITH gone AS (
           DELETE FROM outbox
            WHERE id >= $1 AND id < $2 AND status IN ('done', 'suppressed', 'dropped')
              AND COALESCE(completed_at, updated_at) < now() - make_interval(days => $3)
           RETURNING 1
         )
         SELECT (SELECT count(*)::int FROM gone) AS deleted,
                EXISTS (SELECT 1 FROM outbox WHERE id >= $1 AND id < $2
                           AND created_at >= now() - make_interval(days => $3)) AS younger`,
        [from, to, days],
      );
      return { deleted: res.rows[0]?.deleted ?? 0, stop: res.rows[0]?.younger ?? false };
    },
    next: (width, deleted) => (deleted === 0 ? width * 2 : width),
    removed: (deleted) => {
      totals.outboxDeleted += deleted;
      options.onProgress?.({ ...totals, stage: 'outbox' });
    },
  });
}

/** Superseded revisions past their age, a window of table blocks at a time (a TID range scan; no index needed). */
async function pruneRevisions(
  client: pg.PoolClient,
  days: number,
  policy: RetentionPolicy,
  totals: MaintenanceProgress,
  options: MaintenanceOptions,
): Promise<void> {
  const size = await client.query<{ blocks: string }>(
    `SELECT pg_relation_size('execution_revisions') / current_setting('block_size')::int AS blocks`,
  );
  await removeInWindows({
    from: 0,
    end: Number(size.rows[0]?.blocks ?? 0),
    // About 50 revision rows fit a block: a window of blocks holding roughly batchRows rows.
    width: Math.max(1, Math.round(policy.batchRows / 50)),
    signal: options.signal,
    remove: async (from, to) => {
      const res = await client.query<{ deleted: number }>(
        `WITH gone AS (
           DELETE FROM execution_revisions
            WHERE ctid >= ('(' || $1::bigint || ',0)')::tid AND ctid < ('(' || $2::bigint || ',0)')::tid
              AND created_at < now() - make_interval(days => $3)
           RETURNING 1
         )
         SELECT count(*)::int AS deleted FROM gone`,
        [from, to, days],
      );
      return { deleted: res.rows[0]?.deleted ?? 0 };
    },
    next: (width) => width,
    removed: (deleted) => {
      totals.revisionsDeleted += deleted;
      options.onProgress?.({ ...totals, stage: 'revisions' });
    },
  });
}

interface Windows {
  from: number;
  /** The end of the range, exclusive. */
  end: number;
  width: number;
  signal: AbortSignal | undefined;
  /** Removes what qualifies in [from, to); `stop`: nothing past this window can qualify. */
  remove(from: number, to: number): Promise<{ deleted: number; stop?: boolean }>;
  /** The next window's width after one that removed `deleted` rows. */
  next(width: number, deleted: number): number;
  removed(deleted: number, to: number): void;
}

/**
 * Walks [from, end) one removal statement per window. A statement that ran past its bound or waited too long for a
 * lock (a busy server, a row it wants held) is tried again on half the window; at a one-unit window the failure is
 * the run's.
 */
async function removeInWindows(windows: Windows): Promise<void> {
  let { from, width } = windows;
  while (from < windows.end) {
    windows.signal?.throwIfAborted();
    const to = Math.min(from + width, windows.end);
    let outcome: { deleted: number; stop?: boolean };
    try {
      outcome = await windows.remove(from, to);
    } catch (error) {
      const code = (error as { code?: unknown } | null)?.code;
      const bounded = code === SQLSTATE.queryCanceled || code === SQLSTATE.lockNotAvailable;
      if (!bounded || width === 1) throw error;
      width = Math.max(1, Math.floor(width / 2));
      continue;
    }
    windows.removed(outcome.deleted, to);
    if (outcome.stop === true) return;
    from = to;
    width = windows.next(width, outcome.deleted);
  }
}
