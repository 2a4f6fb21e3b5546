// The durable state of every consumer. Every table is keyed by consumer_id first: one database serves many
// consumers, and each consumer's commits serialise on its own checkpoint row (SELECT … FOR UPDATE).
// Money columns are `numeric` (exact); pg returns them as strings and the code never parses them to numbers.
// Positions are bigint read back as JS numbers (mode 'number'): journal positions stay far below 2^53.
import { sql } from 'drizzle-orm';
import {
  bigint,
  bigserial,
  boolean,
  check,
  customType,
  index,
  integer,
  jsonb,
  numeric,
  pgTable,
  primaryKey,
  text,
  timestamp,
  uniqueIndex,
} from 'drizzle-orm/pg-core';
import type { QuarantineDisposition, ReceiptOutcome } from '../domain/decide.js';
import type { Mappings, StreamFilter } from '../protocol/codec.js';
import type { CommittedState, QuarantineReason } from '../protocol/types.js';

/**
 * Text compared byte by byte (COLLATE "C"), for the columns the keys and indexes are made of. Under the database's
 * default collation (en_US.UTF-8 in the official postgres image) every comparison a B-tree insert or probe makes
 * goes through strcoll; these keys are identifiers, whose order nobody reads as language, and equality is the same
 * under both.
 */
const keyText = customType<{ data: string; driverData: string }>({ dataType: () => 'text COLLATE "C"' });

/**
 * A content hash in its stored form (db/content-hash-column.ts): 0x02 and the digest's 32 bytes, or a legacy hash's
 * 32 bytes alone. pg reads bytea back as a Buffer.
 */
const contentHashBytes = customType<{ data: Buffer; driverData: Buffer }>({ dataType: () => 'bytea' });

const createdAt = () => timestamp('created_at', { withTimezone: true }).notNull().defaultNow();
const updatedAt = () => timestamp('updated_at', { withTimezone: true }).notNull().defaultNow();

/** The subscription binding the saved token belongs to (saved by every commit). */
export const consumerBindings = pgTable('consumer_bindings', {
  consumerId: keyText('consumer_id').primaryKey(),
  subscriptionId: text('subscription_id').notNull(),
  stream: text('stream').notNull(),
  historyId: text('history_id').notNull(),
  filter: jsonb('filter').notNull().$type<StreamFilter>(),
  filterHash: text('filter_hash').notNull(),
  generation: integer('generation').notNull(),
  mappings: jsonb('mappings').notNull().$type<Mappings>(),
  updatedAt: updatedAt(),
});

/** One row per consumer: the only resume point, and the lock every mutation of the consumer takes. */
export const checkpoints = pgTable(
  'checkpoints',
  {
    consumerId: keyText('consumer_id').primaryKey(),
    position: bigint('position', { mode: 'number' }),
    /** The whole opaque token: `text`, never truncated, never parsed. */
    token: text('token'),
    generation: integer('generation'),
    cutPosition: bigint('cut_position', { mode: 'number' }),
    cutReached: boolean('cut_reached').notNull().default(false),
    /** Compare-and-swap counter: +1 on every commit and every state-changing decision. */
    version: integer('version').notNull().default(0),
    /**
     * Checkpoints committed (each also moved `version`) and the events they applied (one `applied` receipt each),
     * over the consumer's life: written by the commit that does it, so every display's totals are the database's.
     */
    checkpointsCommitted: bigint('checkpoints_committed', { mode: 'number' }).notNull().default(0),
    eventsApplied: bigint('events_applied', { mode: 'number' }).notNull().default(0),
    /** Bumped by every activity attempt (acquireLease); fences zombie attempts. */
    leaseEpoch: integer('lease_epoch').notNull().default(0),
    /**
     * The streaming activity (workflow run and activity id) whose attempt took the lease last, and that attempt's
     * number: an earlier attempt of the same activity, started late (its worker was frozen), is refused the lease.
     */
    leaseActivity: text('lease_activity'),
    leaseAttempt: integer('lease_attempt'),
    /** An explicit start an operator decided, consumed by the first commit of that start. */
    pendingStart: text('pending_start').$type<CommittedState['pendingStart']>(),
    abandoned: boolean('abandoned').notNull().default(false),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [
    check(
      'checkpoints_pending_start_check',
      sql`${t.pendingStart} IS NULL OR ${t.pendingStart} IN ('live_cut', 'from_floor')`,
    ),
    check('checkpoints_token_not_empty', sql`${t.token} IS NULL OR length(${t.token}) > 0`),
  ],
);

/** The durable outcome of every event ever accepted: dedup and conflict detection read these. */
export const eventReceipts = pgTable(
  'event_receipts',
  {
    consumerId: keyText('consumer_id').notNull(),
    eventId: keyText('event_id').notNull(),
    /** eventContentHash, stored as bytes; a legacy one (no `v2:`) is compared at this row's position and ordinal. */
    contentHash: contentHashBytes('content_hash').notNull(),
    position: bigint('position', { mode: 'number' }).notNull(),
    ordinal: integer('ordinal').notNull(),
    outcome: text('outcome').notNull().$type<ReceiptOutcome>(),
    createdAt: createdAt(),
  },
  (t) => [
    primaryKey({ columns: [t.consumerId, t.eventId] }),
    // Retention finds the receipts below a stream's floor by position (db/retention.ts). Receipts arrive in
    // position order, so a BRIN summary is enough, and it costs a commit almost nothing where a B-tree would not.
    // autosummarize: autovacuum summarises each range as it fills; an unsummarised range is read by every scan.
    index('event_receipts_position_brin').using('brin', t.position).with({ autosummarize: true }),
    check('event_receipts_outcome_check', sql`${t.outcome} IN ('applied', 'no_effect', 'quarantined')`),
  ],
);

/** Current state of each execution (entity). */
export const executions = pgTable(
  'executions',
  {
    consumerId: keyText('consumer_id').notNull(),
    entityId: keyText('entity_id').notNull(),
    revision: integer('revision').notNull(),
    market: text('market').notNull(),
    asset: text('asset').notNull(),
    side: text('side').notNull(),
    price: numeric('price').notNull(),
    size: numeric('size').notNull(),
    notional: numeric('notional').notNull(),
    wallet: text('wallet').notNull(),
    txHash: text('tx_hash').notNull(),
    firstPosition: bigint('first_position', { mode: 'number' }).notNull(),
    lastPosition: bigint('last_position', { mode: 'number' }).notNull(),
    /** The event that produced the current revision. */
    eventId: text('event_id').notNull(),
    updatedAt: updatedAt(),
  },
  // Only the primary key: the commit reads and writes executions by (consumer, entity) and nothing else is hot;
  // every extra index is paid by every trade of every checkpoint.
  (t) => [primaryKey({ columns: [t.consumerId, t.entityId] })],
);

/**
 * Superseded revisions: a correction moves the state it replaces here. The full history of an execution is
 * these rows plus its current row in `executions`; a trade that is never corrected writes nothing here.
 */
export const executionRevisions = pgTable(
  'execution_revisions',
  {
    consumerId: keyText('consumer_id').notNull(),
    entityId: keyText('entity_id').notNull(),
    revision: integer('revision').notNull(),
    eventId: text('event_id').notNull(),
    position: bigint('position', { mode: 'number' }).notNull(),
    market: text('market').notNull(),
    asset: text('asset').notNull(),
    side: text('side').notNull(),
    price: numeric('price').notNull(),
    size: numeric('size').notNull(),
    notional: numeric('notional').notNull(),
    wallet: text('wallet').notNull(),
    txHash: text('tx_hash').notNull(),
    createdAt: createdAt(),
  },
  (t) => [primaryKey({ columns: [t.consumerId, t.entityId, t.revision] })],
);

/** Per-market aggregates, maintained by deltas in the same transaction as the executions. */
export const marketVolumes = pgTable(
  'market_volumes',
  {
    consumerId: keyText('consumer_id').notNull(),
    market: keyText('market').notNull(),
    volume: numeric('volume').notNull().default('0'),
    executionCount: integer('execution_count').notNull().default(0),
    updatedAt: updatedAt(),
  },
  (t) => [primaryKey({ columns: [t.consumerId, t.market] })],
);

/** Source quality per scope. `last_position` orders notices; `as_of` is the checkpoint position that saved it. */
export const sourceQuality = pgTable(
  'source_quality',
  {
    consumerId: keyText('consumer_id').notNull(),
    scope: keyText('scope').notNull(),
    state: text('state').notNull(),
    lastPosition: bigint('last_position', { mode: 'number' }).notNull(),
    asOf: bigint('as_of', { mode: 'number' }).notNull(),
    updatedAt: updatedAt(),
  },
  (t) => [
    primaryKey({ columns: [t.consumerId, t.scope] }),
    check('source_quality_state_check', sql`${t.state} IN ('ok', 'degraded', 'gap')`),
  ],
);

/** Events the reducer could not apply. Only `terminal` is a durable outcome; `held` blocks the checkpoint. */
export const quarantine = pgTable(
  'quarantine',
  {
    consumerId: keyText('consumer_id').notNull(),
    eventId: keyText('event_id').notNull(),
    entityId: text('entity_id').notNull(),
    kind: text('kind').notNull(),
    position: bigint('position', { mode: 'number' }).notNull(),
    ordinal: integer('ordinal').notNull(),
    /** eventContentHash, stored as bytes; a legacy one (no `v2:`) is compared at this row's position and ordinal. */
    contentHash: contentHashBytes('content_hash').notNull(),
    reason: text('reason').notNull().$type<QuarantineReason>(),
    disposition: keyText('disposition').notNull().$type<QuarantineDisposition>(),
    decidedBy: text('decided_by'),
    decidedAt: timestamp('decided_at', { withTimezone: true }),
    why: text('why'),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [
    primaryKey({ columns: [t.consumerId, t.eventId] }),
    index('quarantine_disposition_idx').on(t.consumerId, t.disposition, t.position),
    check('quarantine_disposition_check', sql`${t.disposition} IN ('held', 'terminal', 'retry')`),
    check('quarantine_reason_check', sql`${t.reason} IN ('unknown_correction_target', 'unsupported_kind')`),
  ],
);

/** Audit of every operator decision, written in the transaction of the state change it implies. */
export const decisions = pgTable(
  'decisions',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    consumerId: keyText('consumer_id').notNull(),
    kind: text('kind').notNull(),
    decision: text('decision').notNull(),
    actor: text('actor').notNull(),
    reason: text('reason').notNull(),
    /** The saved token the decision replaces (gap and binding decisions), kept whole. */
    replacedToken: text('replaced_token'),
    /** Decision-specific detail, e.g. the quarantined eventIds a quarantine decision covered. */
    details: jsonb('details'),
    decidedAt: timestamp('decided_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [
    index('decisions_consumer_idx').on(t.consumerId, t.id),
    check('decisions_kind_check', sql`${t.kind} IN ('gap', 'binding', 'quarantine', 'alert')`),
  ],
);

/**
 * External actions written by the commit and performed by a separate dispatcher. A whale alert that is not a
 * trading signal (replayed, backfilled, late, a correction of a whale) is kept as `suppressed` with its reason;
 * an operator may `drop` a pending or dead one. The insert and a retry NOTIFY `whalehunt_outbox` (migration
 * 0003's triggers), which wakes the dispatchers.
 */
export const outbox = pgTable(
  'outbox',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    consumerId: keyText('consumer_id').notNull(),
    /** `<action>:<eventId>`: replaying an event never writes its action twice. */
    idempotencyKey: keyText('idempotency_key').notNull(),
    eventId: text('event_id').notNull(),
    action: text('action').notNull(),
    payload: jsonb('payload').notNull(),
    status: text('status').notNull().default('pending'),
    /** Why a whale alert was not sent (status `suppressed`): replay, backfill, late, correction. */
    suppressedReason: text('suppressed_reason'),
    attempts: integer('attempts').notNull().default(0),
    lastError: text('last_error'),
    availableAt: timestamp('available_at', { withTimezone: true }).notNull().defaultNow(),
    claimedUntil: timestamp('claimed_until', { withTimezone: true }),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
    completedAt: timestamp('completed_at', { withTimezone: true }),
  },
  (t) => [
    uniqueIndex('outbox_idempotency_idx').on(t.consumerId, t.idempotencyKey),
    // The dispatcher's hot path: due work in order, ignoring finished rows.
    index('outbox_due_idx')
      .on(t.availableAt, t.id)
      .where(sql`${t.status} IN ('pending', 'claimed')`),
    // The operator's and the metrics' view of what failed for good.
    index('outbox_dead_idx')
      .on(t.consumerId, t.id)
      .where(sql`${t.status} = 'dead'`),
    check('outbox_status_check', sql`${t.status} IN ('pending', 'claimed', 'done', 'dead', 'suppressed', 'dropped')`),
    check(
      'outbox_suppressed_reason_check',
      sql`(${t.status} = 'suppressed') = (${t.suppressedReason} IS NOT NULL) AND (${t.suppressedReason} IS NULL OR ${t.suppressedReason} IN ('replay', 'backfill', 'late', 'correction'))`,
    ),
  ],
);

/**
 * Progress of a paginated-history consumer (docs/protocol.md §8): the cursor to fetch next and the end of the
 * complete durable prefix are separate, because a page's events become durable in chunks before its `next`
 * replaces the cursor. `version` is the compare-and-swap every chunk and every cursor swap is fenced on. Its
 * effects (receipts, executions, …) live in the same tables as a stream consumer's, keyed by consumer_id.
 */
export const pageProgress = pgTable(
  'page_progress',
  {
    consumerId: keyText('consumer_id').primaryKey(),
    stream: text('stream').notNull(),
    filter: jsonb('filter').notNull().$type<StreamFilter>(),
    filterHash: text('filter_hash').notNull(),
    /** The history the cursor belongs to, saved with the first cursor. */
    historyId: text('history_id'),
    /** The whole opaque token to fetch next; null: start at the retention floor. */
    resumeCursor: text('resume_cursor'),
    /** Every event at or below this position has a durable outcome (receipt). */
    appliedPosition: bigint('applied_position', { mode: 'number' }).notNull().default(0),
    /**
     * Events applied so far, counted by each chunk's write: the stream consumer's total starts here at handover.
     * Counting receipts instead would scan them all, and miss those retention removed.
     */
    eventsApplied: bigint('events_applied', { mode: 'number' }).notNull().default(0),
    version: integer('version').notNull().default(0),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [check('page_progress_cursor_not_empty', sql`${t.resumeCursor} IS NULL OR length(${t.resumeCursor}) > 0`)],
);

/**
 * The retention floor each consumer's source last announced (the lowest position it still retains) and the history
 * it belongs to, written when a session's `hello` or a page arrives. Maintenance removes receipts below it and
 * records in `pruned_below` how far it has gone, so the next run starts there (docs/design.md#retention).
 */
export const retentionFloors = pgTable('retention_floors', {
  consumerId: keyText('consumer_id').primaryKey(),
  historyId: text('history_id').notNull(),
  floor: bigint('floor', { mode: 'number' }).notNull(),
  /** Receipts of this consumer at positions below this one have been removed (0: none yet). */
  prunedBelow: bigint('pruned_below', { mode: 'number' }).notNull().default(0),
  observedAt: timestamp('observed_at', { withTimezone: true }).notNull().defaultNow(),
});

/** One row per maintenance run: what it removed, and how it ended. */
export const maintenanceRuns = pgTable(
  'maintenance_runs',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    startedAt: timestamp('started_at', { withTimezone: true }).notNull().defaultNow(),
    finishedAt: timestamp('finished_at', { withTimezone: true }),
    status: text('status').notNull().default('running'),
    receiptsDeleted: bigint('receipts_deleted', { mode: 'number' }).notNull().default(0),
    outboxDeleted: bigint('outbox_deleted', { mode: 'number' }).notNull().default(0),
    revisionsDeleted: bigint('revisions_deleted', { mode: 'number' }).notNull().default(0),
    /** Per consumer: the floor used and the receipts removed below it. */
    details: jsonb('details'),
    error: text('error'),
  },
  (t) => [check('maintenance_runs_status_check', sql`${t.status} IN ('running', 'succeeded', 'failed')`)],
);
