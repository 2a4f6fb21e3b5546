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
}
