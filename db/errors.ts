// Errors of the storage room: what the rows say (no row, a row of the other kind) and the database failing
// underneath. The commit's own rules and outcomes are the domain's (domain/errors.ts, domain/outcomes.ts).
// Callers branch on `code`, never on messages.

/** A consumer that has no checkpoint row yet (acquireLease creates it). */
export class UnknownConsumer extends Error {
  readonly code = 'unknown_consumer' as const;
  override readonly name = 'UnknownConsumer';
  constructor(readonly consumerId: string) {
    super(`consumer ${consumerId} has no checkpoint row: acquire a lease first`);
  }
}

/** The id belongs to a consumer of the other kind (stream vs page): their effects would share rows under two locks. */
export class ConsumerKindMismatch extends Error {
  readonly code = 'consumer_kind_mismatch' as const;
  override readonly name = 'ConsumerKindMismatch';
  constructor(
    readonly consumerId: string,
    readonly actualKind: 'stream' | 'page',
  ) {
    super(
      `consumer ${consumerId} is a ${actualKind} consumer, not a ${actualKind === 'page' ? 'stream' : 'page'} consumer: choose another consumer id`,
    );
  }
}

/**
 * A later attempt of the same streaming activity holds the lease: this attempt started late (its worker was frozen
 * while the server retried it elsewhere) and must not take the lease back.
 */
export class StaleLeaseAttempt extends Error {
  readonly code = 'stale_lease_attempt' as const;
  override readonly name = 'StaleLeaseAttempt';
  constructor(
    readonly consumerId: string,
    readonly attempt: number,
    readonly holderAttempt: number,
  ) {
    super(
      `lease of consumer ${consumerId} refused to attempt ${attempt}: attempt ${holderAttempt} of the same run took it over`,
    );
  }
}

/**
 * The session is gone or could not be had: refused, reset or ended by the server (shutdown, crash, restart, an idle
 * transaction timed out), or the server is starting up. Not a failed statement on a live session (a lock or
 * statement timeout, a serialization failure): those say nothing about the database being away.
 */
export function isConnectionLoss(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) {
    // admin_shutdown, crash_shutdown, cannot_connect_now, idle_in_transaction_session_timeout, class 08
    return ['57P01', '57P02', '57P03', '25P03'].includes(code) || code.startsWith('08');
  }
  return /ECONNREFUSED|ECONNRESET|EPIPE|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH|ENOTFOUND|EAI_AGAIN|Connection terminated|not queryable|timeout exceeded when trying to connect/i.test(
    `${typeof code === 'string' ? code : ''} ${error.message}`,
  );
}

/**
 * The database failed underneath an operation (connection lost, serialization failure, …). Carries the
 * SQLSTATE and whether the same operation may simply be retried; the pg error is the `cause`.
 */
export class StorageFailure extends Error {
  readonly code = 'storage_failure' as const;
  override readonly name = 'StorageFailure';
  constructor(
    readonly operation: string,
    readonly consumerId: string | undefined,
    readonly sqlState: string | undefined,
    readonly retryable: boolean,
    options: { cause: unknown },
  ) {
    super(
      `${operation}${consumerId ? ` for consumer ${consumerId}` : ''} failed` +
        `${sqlState ? ` (SQLSTATE ${sqlState})` : ''}: ${options.cause instanceof Error ? options.cause.message : String(options.cause)}`,
      options,
    );
  }

  /** The database went away (isConnectionLoss of the cause): wait for it to answer rather than back off blindly. */
  get connectionLost(): boolean {
    return isConnectionLoss(this.cause);
  }
}
