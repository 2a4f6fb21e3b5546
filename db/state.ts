// The committed state of a consumer: reading it, locking it, and taking a lease on it.
import type pg from 'pg';
import type { Binding, CommittedState } from '../protocol/types.js';
import { ConsumerKindMismatch, StaleLeaseAttempt } from './errors.js';
import type { OuterJoined, RawRow } from './rows.js';
import type { checkpoints, consumerBindings } from './schema.js';
import { inTransaction, toStorageFailure } from './transaction.js';

type BindingRow = RawRow<typeof consumerBindings>;
/** STATE_COLUMNS: the checkpoint row and its binding (outer-joined; its generation renamed). */
type StateRow = Pick<
  RawRow<typeof checkpoints>,
  | 'consumer_id'
  | 'lease_epoch'
  | 'version'
  | 'position'
  | 'token'
  | 'generation'
  | 'cut_position'
  | 'cut_reached'
  | 'pending_start'
  | 'abandoned'
  | 'updated_at'
  | 'checkpoints_committed'
  | 'events_applied'
> &
  OuterJoined<
    Pick<BindingRow, 'subscription_id' | 'stream' | 'history_id' | 'filter' | 'filter_hash' | 'mappings'> & {
      binding_generation: BindingRow['generation'];
    }
  >;

const STATE_COLUMNS = `c.consumer_id, c.lease_epoch, c.version, c.position, c.token, c.generation, c.cut_position,
  c.cut_reached, c.pending_start, c.abandoned, c.updated_at, c.checkpoints_committed, c.events_applied,
  b.subscription_id, b.stream, b.history_id, b.filter, b.filter_hash, b.generation AS binding_generation, b.mappings`;

const nullableNumber = (value: string | null): number | null => (value === null ? null : Number(value));

function toState(row: StateRow): CommittedState {
  const binding: Binding | null =
    row.subscription_id === null
      ? null
      : {
          consumerId: row.consumer_id,
          subscriptionId: row.subscription_id,
          stream: row.stream!,
          historyId: row.history_id!,
          filter: row.filter!,
          filterHash: row.filter_hash!,
          generation: row.binding_generation!,
          mappings: row.mappings!,
        };
  return {
    consumerId: row.consumer_id,
    leaseEpoch: row.lease_epoch,
    version: row.version,
    position: nullableNumber(row.position),
    token: row.token,
    generation: row.generation,
    binding,
    cutPosition: nullableNumber(row.cut_position),
    cutReached: row.cut_reached,
    pendingStart: row.pending_start,
    abandoned: row.abandoned,
    // A row that never committed has no resume point yet; its creation time is not an update.
    updatedAt: row.position === null && row.version === 0 ? null : row.updated_at.toISOString(),
    // int8 arrives as a string (nothing is parsed globally); a lifetime count stays far below 2^53.
    totals: { checkpointsCommitted: Number(row.checkpoints_committed), eventsApplied: Number(row.events_applied) },
  };
}

async function selectState(client: pg.PoolClient | pg.Pool, consumerId: string): Promise<CommittedState | null> {
  const res = await client.query<StateRow>(
    `SELECT ${STATE_COLUMNS}
       FROM checkpoints c LEFT JOIN consumer_bindings b ON b.consumer_id = c.consumer_id
      WHERE c.consumer_id = $1`,
    [consumerId],
  );
  return res.rows[0] ? toState(res.rows[0]) : null;
}

/**
 * Locks the consumer's checkpoint row for the rest of the transaction and returns its state. Every mutation of
 * a consumer (commit, decision) goes through here, so they serialise per consumer and never interleave.
 */
export async function lockCheckpoint(client: pg.PoolClient, consumerId: string): Promise<CommittedState | null> {
  const res = await client.query<StateRow>({
    name: 'whalehunt_lock_checkpoint',
    text: `SELECT ${STATE_COLUMNS}
             FROM checkpoints c LEFT JOIN consumer_bindings b ON b.consumer_id = c.consumer_id
            WHERE c.consumer_id = $1
              FOR UPDATE OF c`,
    values: [consumerId],
  });
  return res.rows[0] ? toState(res.rows[0]) : null;
}

export async function loadCommitted(pool: pg.Pool, consumerId: string): Promise<CommittedState | null> {
  try {
    return await selectState(pool, consumerId);
  } catch (error) {
    throw toStorageFailure('loadCommitted', consumerId, error);
  }
}

/**
 * Serialises, until the transaction ends, every creation of a consumer's progress row (stream checkpoint or page
 * progress), so the check that an id is not already the other kind holds when the row is inserted.
 */
export async function lockConsumerKind(client: pg.PoolClient, consumerId: string): Promise<void> {
  await client.query("SELECT pg_advisory_xact_lock(hashtextextended('whalehunt-consumer:' || $1, 0))", [consumerId]);
}

/** The streaming activity attempt that asks for a lease: the activity (its workflow run and id) and its number. */
export interface LeaseAttempt {
  activity: string;
  number: number;
}

export interface LeaseRequest {
  /** The caller holds a committed copy of this consumer: a missing row is not created. */
  existingOnly?: boolean;
  /** Refused (StaleLeaseAttempt) when a later attempt of the same activity has taken the lease. */
  attempt?: LeaseAttempt;
}

/**
 * Starts an activity attempt: creates the consumer's row if absent and bumps its lease epoch, so every commit
 * of an older attempt is fenced from now on. Returns the state to resume from (its leaseEpoch and version are
 * the fence of this attempt's commits). An id that belongs to a page consumer is refused (ConsumerKindMismatch).
 * With `existingOnly` (the caller holds a committed copy of this consumer) a missing row is not created: nothing
 * is written and the result is null, for the caller to report the database as behind.
 */
export async function acquireLease(pool: pg.Pool, consumerId: string): Promise<CommittedState>;
export async function acquireLease(
  pool: pg.Pool,
  consumerId: string,
  request: LeaseRequest,
): Promise<CommittedState | null>;
export async function acquireLease(
  pool: pg.Pool,
  consumerId: string,
  request: LeaseRequest = {},
): Promise<CommittedState | null> {
  const attempt = request.attempt ?? null;
  return inTransaction(pool, 'acquireLease', consumerId, async (client) => {
    if (!request.existingOnly) {
      await lockConsumerKind(client, consumerId);
      const pageConsumer = await client.query('SELECT 1 FROM page_progress WHERE consumer_id = $1', [consumerId]);
      if (pageConsumer.rowCount) throw new ConsumerKindMismatch(consumerId, 'page');
      await client.query('INSERT INTO checkpoints (consumer_id) VALUES ($1) ON CONFLICT (consumer_id) DO NOTHING', [
        consumerId,
      ]);
    }
    // One statement takes the lease unless a later attempt of the same activity holds it.
    const taken = await client.query<{ taken: boolean; lease_attempt: number | null }>(
      `WITH held AS (SELECT lease_activity, lease_attempt FROM checkpoints WHERE consumer_id = $1 FOR UPDATE),
            bumped AS (
              UPDATE checkpoints c SET lease_epoch = c.lease_epoch + 1, lease_activity = $2, lease_attempt = $3
                FROM held
               WHERE c.consumer_id = $1
                 AND ($2::text IS NULL OR held.lease_activity IS DISTINCT FROM $2 OR held.lease_attempt <= $3)
              RETURNING 1)
       SELECT EXISTS (SELECT 1 FROM bumped) AS taken, held.lease_attempt FROM held`,
      [consumerId, attempt?.activity ?? null, attempt?.number ?? null],
    );
    const row = taken.rows[0];
    if (!row) return null; // existingOnly and no row: nothing written
    if (!row.taken) throw new StaleLeaseAttempt(consumerId, attempt!.number, row.lease_attempt ?? 0);
    return (await selectState(client, consumerId))!;
  });
}
