// Transactions and the translation of driver errors. Typed errors of our own pass through unchanged;
// everything else is rethrown as StorageFailure with the pg error as its cause.
import type pg from 'pg';
import { InvalidPlan } from '../domain/errors.js';
import { ConsumerKindMismatch, StaleLeaseAttempt, StorageFailure, UnknownConsumer } from './errors.js';

/** SQLSTATEs the code branches on (https://www.postgresql.org/docs/current/errcodes-appendix.html). */
export const SQLSTATE = {
  serializationFailure: '40001',
  deadlockDetected: '40P01',
  uniqueViolation: '23505',
  duplicateDatabase: '42P04',
  adminShutdown: '57P01',
  crashShutdown: '57P02',
  cannotConnectNow: '57P03',
  /** statement_timeout (or a cancel request) ended the statement. */
  queryCanceled: '57014',
  /** lock_timeout ended a lock wait. */
  lockNotAvailable: '55P03',
  /** idle_in_transaction_session_timeout ended the session. */
  idleInTransactionTimeout: '25P03',
  tooManyConnections: '53300',
  raiseException: 'P0001',
  /** a column the statement names does not exist (a database not yet migrated to it) */
  undefinedColumn: '42703',
} as const;

export function sqlStateOf(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}

/** Failures where running the same operation again is correct: the transaction left no trace. */
function isRetryable(sqlState: string | undefined, error: unknown): boolean {
  if (sqlState === undefined) {
    // No SQLSTATE: a socket-level failure (ECONNRESET, ECONNREFUSED, connection terminated).
    return (
      error instanceof Error &&
      /ECONN|terminated|timeout|EPIPE|not queryable/i.test(
        `${(error as { code?: string }).code ?? ''} ${error.message}`,
      )
    );
  }
  return (
    sqlState === SQLSTATE.serializationFailure ||
    sqlState === SQLSTATE.deadlockDetected ||
    sqlState === SQLSTATE.adminShutdown ||
    sqlState === SQLSTATE.crashShutdown ||
    sqlState === SQLSTATE.cannotConnectNow ||
    // A bounded wait ran out (a frozen lock holder, a stalled server): a later attempt finds it released.
    sqlState === SQLSTATE.queryCanceled ||
    sqlState === SQLSTATE.lockNotAvailable ||
    sqlState === SQLSTATE.idleInTransactionTimeout ||
    sqlState === SQLSTATE.tooManyConnections ||
    sqlState.startsWith('08') // connection exception class
  );
}

export function toStorageFailure(operation: string, consumerId: string | undefined, error: unknown): Error {
  if (
    error instanceof InvalidPlan ||
    error instanceof UnknownConsumer ||
    error instanceof ConsumerKindMismatch ||
    error instanceof StaleLeaseAttempt ||
    error instanceof StorageFailure
  )
    return error;
  const sqlState = sqlStateOf(error);
  return new StorageFailure(operation, consumerId, sqlState, isRetryable(sqlState, error), { cause: error });
}

/**
 * Runs `fn` in one READ COMMITTED transaction on a dedicated client. Commits when `fn` resolves, rolls back
 * when it throws; a client whose rollback failed is destroyed rather than returned to the pool.
 */
export async function inTransaction<T>(
  pool: pg.Pool,
  operation: string,
  consumerId: string | undefined,
  fn: (client: pg.PoolClient) => Promise<T>,
): Promise<T> {
  let client: pg.PoolClient;
  try {
    client = await pool.connect();
  } catch (error) {
    throw toStorageFailure(operation, consumerId, error);
  }
  let broken: Error | undefined;
  try {
    await client.query('BEGIN');
    const result = await fn(client);
    await client.query('COMMIT');
    return result;
  } catch (error) {
    try {
      await client.query('ROLLBACK');
    } catch (rollbackError) {
      broken = rollbackError instanceof Error ? rollbackError : new Error(String(rollbackError));
    }
    throw toStorageFailure(operation, consumerId, error);
  } finally {
    client.release(broken);
  }
}
