// The outbox after the commit: the dispatcher claims due rows with a lease, then completes or fails them; the
// operator lists, retries and drops them. The commit only ever inserts (keyed by `<action>:<eventId>`), so a
// replayed event never produces a second row to perform. Every claim adds one to `attempts`, and a completion
// or failure names the attempt it belongs to: a dispatcher whose lease ran out (another one re-claimed the row)
// cannot complete or fail the newer claim.
import pg from 'pg';
import { insertAudit } from './decisions.js';
import { inTransaction, toStorageFailure } from './transaction.js';

export interface OutboxItem {
  id: number;
  consumerId: string;
  idempotencyKey: string;
  eventId: string;
  action: string;
  payload: Record<string, unknown>;
  /** The claim's attempt number (1 on the first claim): the fence of its completion or failure. */
  attempts: number;
  /** How long before this claim the commit wrote the row, by the database's clock. */
  ageMs: number;
}

/** A failed action is retried with exponential backoff (capped) until this many attempts, then parked as dead. */
export const DEFAULT_MAX_OUTBOX_ATTEMPTS = 10;
const MAX_BACKOFF_SECONDS = 300;

/** The channel the outbox triggers NOTIFY when an alert is due now (migration 0003). */
export const OUTBOX_CHANNEL = 'whalehunt_outbox';

/**
 * Claims up to `limit` due rows: pending ones whose time has come and claimed ones whose lease ran out (their
 * dispatcher died). SKIP LOCKED lets several dispatchers claim disjoint rows concurrently.
 */
export async function claimOutbox(pool: pg.Pool, opts: { limit: number; leaseMs: number }): Promise<OutboxItem[]> {
  try {
    const res = await pool.query<{
      id: string;
      consumer_id: string;
      idempotency_key: string;
      event_id: string;
      action: string;
      payload: Record<string, unknown>;
      attempts: number;
      age_ms: number;
    }>({
      name: 'whalehunt_outbox_claim',
      text: `WITH due AS (
         SELECT id FROM outbox
          WHERE (status = 'pending' AND available_at <= now())
             OR (status = 'claimed' AND claimed_until < now())
          ORDER BY available_at, id
          LIMIT $1
          FOR UPDATE SKIP LOCKED
       )
       UPDATE outbox o
          SET status = 'claimed', attempts = o.attempts + 1,
              claimed_until = now() + make_interval(secs => $2::double precision / 1000), updated_at = now()
         FROM due WHERE o.id = due.id
       RETURNING o.id, o.consumer_id, o.idempotency_key, o.event_id, o.action, o.payload, o.attempts,
                 (extract(epoch FROM clock_timestamp() - o.created_at) * 1000)::float8 AS age_ms`,
      values: [opts.limit, opts.leaseMs],
    });
    return res.rows
      .map((r) => ({
        id: Number(r.id),
        consumerId: r.consumer_id,
        idempotencyKey: r.idempotency_key,
        eventId: r.event_id,
        action: r.action,
        payload: r.payload,
        attempts: r.attempts,
        ageMs: r.age_ms,
      }))
      .sort((a, b) => a.id - b.id);
  } catch (error) {
    throw toStorageFailure('claimOutbox', undefined, error);
  }
}

/** A claim by its fence: the row and the attempt that claimed it. */
export type OutboxClaim = Pick<OutboxItem, 'id' | 'attempts'>;

/**
 * Marks claimed actions performed, in one statement. Returns the ids completed: a claim that is no longer the
 * row's latest (its lease ran out and another dispatcher re-claimed it) is left to that dispatcher.
 */
export async function completeOutbox(pool: pg.Pool, claims: readonly OutboxClaim[]): Promise<number[]> {
  if (claims.length === 0) return [];
  try {
    const res = await pool.query<{ id: string }>({
      name: 'whalehunt_outbox_complete',
      text: `UPDATE outbox o
                SET status = 'done', completed_at = now(), claimed_until = NULL, last_error = NULL, updated_at = now()
               FROM unnest($1::bigint[], $2::int[]) AS c(id, attempts)
              WHERE o.id = c.id AND o.attempts = c.attempts AND o.status = 'claimed'
          RETURNING o.id`,
      values: [claims.map((c) => c.id), claims.map((c) => c.attempts)],
    });
    return res.rows.map((r) => Number(r.id));
  } catch (error) {
    throw toStorageFailure('completeOutbox', undefined, error);
  }
}

/** Gives claims back unperformed (a dispatcher stopping, or one that could not start a POST within its lease). */
export async function releaseOutbox(pool: pg.Pool, claims: readonly OutboxClaim[]): Promise<void> {
  if (claims.length === 0) return;
  try {
    await pool.query(
      `UPDATE outbox o
          SET status = 'pending', attempts = o.attempts - 1, claimed_until = NULL, updated_at = now()
         FROM unnest($1::bigint[], $2::int[]) AS c(id, attempts)
        WHERE o.id = c.id AND o.attempts = c.attempts AND o.status = 'claimed'`,
      [claims.map((c) => c.id), claims.map((c) => c.attempts)],
    );
  } catch (error) {
    throw toStorageFailure('releaseOutbox', undefined, error);
  }
}

/**
 * Records a failed attempt: back to pending after a backoff, or `dead` once maxAttempts is reached. Returns
 * whether the row is now dead (false also when the claim was no longer the row's). The error text is the
 * dispatcher's responsibility to keep free of secrets; it is stored truncated.
 */
export async function failOutbox(
  pool: pg.Pool,
  claim: OutboxClaim,
  error: string,
  opts: { maxAttempts?: number } = {},
): Promise<boolean> {
  try {
    const res = await pool.query<{ status: string }>(
      `UPDATE outbox
          SET status = CASE WHEN attempts >= $4 THEN 'dead' ELSE 'pending' END,
              last_error = left($3, 2000), claimed_until = NULL, updated_at = now(),
              available_at = now() + make_interval(secs => least(power(2, attempts), $5))
        WHERE id = $1 AND attempts = $2 AND status = 'claimed'
    RETURNING status`,
      [claim.id, claim.attempts, error, opts.maxAttempts ?? DEFAULT_MAX_OUTBOX_ATTEMPTS, MAX_BACKOFF_SECONDS],
    );
    return res.rows[0]?.status === 'dead';
  } catch (cause) {
    throw toStorageFailure('failOutbox', undefined, cause);
  }
}

/** A LISTEN connection of its own (a pooled one would be handed to other work between notifications). */
export interface OutboxListener {
  close(): Promise<void>;
}

/**
 * Calls `onDue` on every NOTIFY of OUTBOX_CHANNEL; `onLost` once if the connection breaks (the caller polls
 * meanwhile and listens again later). Throws StorageFailure when it cannot connect.
 */
export async function listenForDueOutbox(
  pool: pg.Pool,
  onDue: () => void,
  onLost: (error: Error) => void,
): Promise<OutboxListener> {
  const client = new pg.Client(pool.options);
  let closing = false;
  client.on('notification', onDue);
  client.on('error', (error) => {
    if (!closing) onLost(error);
  });
  try {
    await client.connect();
    await client.query(`LISTEN ${OUTBOX_CHANNEL}`);
  } catch (error) {
    closing = true;
    await client.end().catch(() => undefined);
    throw toStorageFailure('listenForDueOutbox', undefined, error);
  }
  return {
    close: async () => {
      closing = true;
      await client.end().catch(() => undefined);
    },
  };
}

export const OUTBOX_STATES = ['pending', 'claimed', 'done', 'dead', 'suppressed', 'dropped'] as const;
export type OutboxState = (typeof OUTBOX_STATES)[number];

/** One outbox row as an operator sees it. */
export interface OutboxRow {
  id: number;
  consumerId: string;
  idempotencyKey: string;
  eventId: string;
  action: string;
  status: OutboxState;
  suppressedReason: string | null;
  attempts: number;
  lastError: string | null;
  createdAt: string;
  availableAt: string;
  completedAt: string | null;
  payload: Record<string, unknown>;
}

/** Newest first, at most `limit`; `state` pending includes rows being sent (claimed). */
export async function listOutbox(
  pool: pg.Pool,
  opts: { consumerId?: string; state?: OutboxState; limit: number },
): Promise<OutboxRow[]> {
  const states = opts.state === undefined ? null : opts.state === 'pending' ? ['pending', 'claimed'] : [opts.state];
  try {
    const res = await pool.query<{
      id: string;
      consumer_id: string;
      idempotency_key: string;
      event_id: string;
      action: string;
      status: OutboxState;
      suppressed_reason: string | null;
      attempts: number;
      last_error: string | null;
      created_at: Date;
      available_at: Date;
      completed_at: Date | null;
      payload: Record<string, unknown>;
    }>(
      `SELECT id, consumer_id, idempotency_key, event_id, action, status, suppressed_reason, attempts, last_error,
              created_at, available_at, completed_at, payload
         FROM outbox
        WHERE ($1::text IS NULL OR consumer_id = $1) AND ($2::text[] IS NULL OR status = ANY($2))
        ORDER BY id DESC
        LIMIT $3`,
      [opts.consumerId ?? null, states, opts.limit],
    );
    return res.rows.map((r) => ({
      id: Number(r.id),
      consumerId: r.consumer_id,
      idempotencyKey: r.idempotency_key,
      eventId: r.event_id,
      action: r.action,
      status: r.status,
      suppressedReason: r.suppressed_reason,
      attempts: r.attempts,
      lastError: r.last_error,
      createdAt: r.created_at.toISOString(),
      availableAt: r.available_at.toISOString(),
      completedAt: r.completed_at?.toISOString() ?? null,
      payload: r.payload,
    }));
  } catch (error) {
    throw toStorageFailure('listOutbox', opts.consumerId, error);
  }
}

/** The alerts of one consumer (or all) waiting and failed, for `status` and Current Details. */
export interface OutboxSummary {
  pending: number;
  dead: number;
  /** Age of the oldest alert waiting to be sent; null when none waits. */
  oldestPendingSeconds: number | null;
}

export async function summarizeOutbox(pool: pg.Pool | pg.PoolClient, consumerId?: string): Promise<OutboxSummary> {
  try {
    const res = await pool.query<{ pending: string; dead: string; oldest: number | null }>(
      `SELECT (SELECT count(*) FROM outbox WHERE status IN ('pending', 'claimed') AND ($1::text IS NULL OR consumer_id = $1)) AS pending,
              (SELECT count(*) FROM outbox WHERE status = 'dead' AND ($1::text IS NULL OR consumer_id = $1)) AS dead,
              (SELECT extract(epoch FROM now() - min(created_at))::float8 FROM outbox
                WHERE status IN ('pending', 'claimed') AND ($1::text IS NULL OR consumer_id = $1)) AS oldest`,
      [consumerId ?? null],
    );
    const row = res.rows[0]!;
    return { pending: Number(row.pending), dead: Number(row.dead), oldestPendingSeconds: row.oldest };
  } catch (error) {
    throw toStorageFailure('summarizeOutbox', consumerId, error);
  }
}

/** Which rows an operator's retry or drop covers: named ids, or every dead row (of one consumer, or all). */
export type OutboxSelection = { ids: readonly number[] } | { allDead: true; consumerId?: string };

export interface OutboxDecision {
  actor: string;
  reason: string;
}

/**
 * Sends dead or suppressed alerts (again): pending now, attempts from zero, with the same key. Audited as a
 * decision of kind `alert` per consumer. Returns the ids that moved; a row in any other state is left alone.
 */
export async function retryOutbox(
  pool: pg.Pool,
  selection: OutboxSelection,
  decision: OutboxDecision,
): Promise<number[]> {
  return operate(pool, 'retry', ['dead', 'suppressed'], selection, decision);
}

/** Gives up on pending or dead alerts: `dropped`, never sent. Audited like retry. */
export async function dropOutbox(
  pool: pg.Pool,
  selection: OutboxSelection,
  decision: OutboxDecision,
): Promise<number[]> {
  return operate(pool, 'drop', ['pending', 'dead'], selection, decision);
}

async function operate(
  pool: pg.Pool,
  operation: 'retry' | 'drop',
  from: readonly OutboxState[],
  selection: OutboxSelection,
  decision: OutboxDecision,
): Promise<number[]> {
  const ids = 'ids' in selection ? selection.ids : null;
  const consumerId = 'ids' in selection ? null : (selection.consumerId ?? null);
  const states = 'ids' in selection ? from : ['dead'];
  const set =
    operation === 'retry'
      ? `status = 'pending', suppressed_reason = NULL, attempts = 0, last_error = NULL, available_at = now()`
      : `status = 'dropped', claimed_until = NULL`;
  return inTransaction(pool, `${operation}Outbox`, consumerId ?? undefined, async (client) => {
    const res = await client.query<{ id: string; consumer_id: string; idempotency_key: string; from_status: string }>(
      `WITH chosen AS (
         SELECT id, status FROM outbox
          WHERE status = ANY($1::text[])
            AND ($2::bigint[] IS NULL OR id = ANY($2))
            AND ($3::text IS NULL OR consumer_id = $3)
          FOR UPDATE
       )
       UPDATE outbox o SET ${set}, updated_at = now()
         FROM chosen WHERE o.id = chosen.id
       RETURNING o.id, o.consumer_id, o.idempotency_key, chosen.status AS from_status`,
      [states, ids, consumerId],
    );
    const byConsumer = new Map<string, { id: number; key: string; from: string }[]>();
    for (const row of res.rows) {
      const list = byConsumer.get(row.consumer_id) ?? [];
      list.push({ id: Number(row.id), key: row.idempotency_key, from: row.from_status });
      byConsumer.set(row.consumer_id, list);
    }
    for (const [consumer, alerts] of byConsumer) {
      await insertAudit(client, {
        consumerId: consumer,
        kind: 'alert',
        decision: operation,
        actor: decision.actor,
        reason: decision.reason,
        replacedToken: null,
        details: { alerts },
      });
    }
    return res.rows.map((r) => Number(r.id)).sort((a, b) => a - b);
  });
}
