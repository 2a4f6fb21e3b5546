// The outbox dispatcher's side: claim due rows with a lease, then complete or fail them. The commit only ever
// inserts (keyed by `<action>:<eventId>`), so a replayed event never produces a second row to perform.
import type pg from 'pg';
import { toStorageFailure } from './transaction.js';

export interface OutboxItem {
  id: number;
  consumerId: string;
  idempotencyKey: string;
  eventId: string;
  action: string;
  payload: Record<string, unknown>;
  attempts: number;
}

/** A failed action is retried with exponential backoff (capped) until this many attempts, then parked as dead. */
export const DEFAULT_MAX_OUTBOX_ATTEMPTS = 10;
const MAX_BACKOFF_SECONDS = 300;

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
    }>(
      `WITH due AS (
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
       RETURNING o.id, o.consumer_id, o.idempotency_key, o.event_id, o.action, o.payload, o.attempts`,
      [opts.limit, opts.leaseMs],
    );
    return res.rows
      .map((r) => ({
        id: Number(r.id),
        consumerId: r.consumer_id,
        idempotencyKey: r.idempotency_key,
        eventId: r.event_id,
        action: r.action,
        payload: r.payload,
        attempts: r.attempts,
      }))
      .sort((a, b) => a.id - b.id);
  } catch (error) {
    throw toStorageFailure('claimOutbox', undefined, error);
  }
}

/** Marks a claimed action performed. Returns false when the row was not claimed (e.g. already completed). */
export async function completeOutbox(pool: pg.Pool, id: number): Promise<boolean> {
  try {
    const res = await pool.query(
      `UPDATE outbox SET status = 'done', completed_at = now(), claimed_until = NULL, last_error = NULL, updated_at = now()
        WHERE id = $1 AND status = 'claimed'`,
      [id],
    );
    return (res.rowCount ?? 0) > 0;
  } catch (error) {
    throw toStorageFailure('completeOutbox', undefined, error);
  }
}

/**
 * Records a failed attempt: back to pending after a backoff, or `dead` once maxAttempts is reached. The error
 * text is the dispatcher's responsibility to keep free of secrets; it is stored truncated.
 */
export async function failOutbox(
  pool: pg.Pool,
  id: number,
  error: string,
  opts: { maxAttempts?: number } = {},
): Promise<void> {
  try {
    await pool.query(
      `UPDATE outbox
          SET status = CASE WHEN attempts >= $3 THEN 'dead' ELSE 'pending' END,
              last_error = left($2, 2000), claimed_until = NULL, updated_at = now(),
              available_at = now() + make_interval(secs => least(power(2, attempts), $4))
        WHERE id = $1 AND status = 'claimed'`,
      [id, error, opts.maxAttempts ?? DEFAULT_MAX_OUTBOX_ATTEMPTS, MAX_BACKOFF_SECONDS],
    );
  } catch (cause) {
    throw toStorageFailure('failOutbox', undefined, cause);
  }
}
