// Bounds on every wait a consumer's connection can make, sent as startup parameters of each connection. A
// worker frozen inside a transaction (SIGSTOP, a GC pause, a partition) must not hold the checkpoint row past a
// heartbeat timeout: the idle-in-transaction bound, shorter than that timeout, ends its session, so the attempt that
// takes over finds the row free (or waits on it at most one lock timeout).

export interface SessionBounds {
  /** Longest wait for a row or advisory lock (lock_timeout). */
  lockTimeoutMs: number;
  /** Longest run of one statement (statement_timeout). */
  statementTimeoutMs: number;
  /** Longest idle pause inside a transaction before its session ends (idle_in_transaction_session_timeout). */
  idleInTransactionTimeoutMs: number;
}

/** The idle-in-transaction bound is well inside the workflow's default heartbeat timeout (3 s). */
export const DEFAULT_SESSION_BOUNDS: SessionBounds = {
  lockTimeoutMs: 3_000,
  statementTimeoutMs: 8_000,
  idleInTransactionTimeoutMs: 2_000,
};

/** The pg connection settings that make the server enforce `bounds` on every session of a pool. */
export function sessionParameters(bounds: SessionBounds): {
  lock_timeout: number;
  statement_timeout: number;
  idle_in_transaction_session_timeout: number;
} {
  return {
    lock_timeout: bounds.lockTimeoutMs,
    statement_timeout: bounds.statementTimeoutMs,
    idle_in_transaction_session_timeout: bounds.idleInTransactionTimeoutMs,
  };
}

/**
 * Longest a checkpoint commit may take before the run gives it up: one lock wait plus one statement's worth of
 * work (a commit is a handful of short statements).
 */
export function commitBoundMs(bounds: SessionBounds): number {
  return bounds.lockTimeoutMs + bounds.statementTimeoutMs;
}
