// The streaming run's typed errors: each carries a code and whether a retry can help; the activity wrapper turns
// them into Temporal failures.
import { describeFenced } from '../db/commit.js';
import type { CheckpointFenced } from '../db/commit-types.js';
import type { CheckpointSummary } from './types.js';

/** The database is behind the workflow's copy: a restored backup or a bug. Not retryable. */
export class DatabaseBehind extends Error {
  override readonly name = 'DatabaseBehind';
  readonly code = 'database_behind' as const;
  readonly retryable = false;
  constructor(
    readonly consumerId: string,
    /** null: the database has no checkpoint row for the consumer at all. */
    readonly databaseVersion: number | null,
    readonly expectedVersion: number,
  ) {
    super(
      databaseVersion === null
        ? `database has no checkpoint for consumer ${consumerId}, the workflow expects version ${expectedVersion} (another database, a restored backup or a bug); nothing was written`
        : `database for consumer ${consumerId} is behind the workflow: version ${databaseVersion} < expected ${expectedVersion} (restored backup or bug)`,
    );
  }
}

/** Another attempt owns the consumer's lease: this one is a zombie and stops without ACK. */
export class LeaseLost extends Error {
  override readonly name = 'LeaseLost';
  readonly code = 'lease_lost' as const;
  readonly retryable = false;
  constructor(
    readonly consumerId: string,
    readonly fenced: CheckpointFenced,
  ) {
    super(`lease lost for consumer ${consumerId}: ${describeFenced(consumerId, fenced)}`);
  }
}

export type StreamTransportCode =
  | 'connect_failed'
  | 'connection_lost'
  | 'protocol_violation'
  | 'staging_bound_exceeded'
  | 'stale_generation'
  | 'overloaded'
  | 'slow_consumer';

/** Reconnects ran out or the server asked us to back off: Temporal retries the activity. */
export class StreamTransportError extends Error {
  override readonly name = 'StreamTransportError';
  readonly retryable = true;
  /** The committed checkpoint when the run gave up: the workflow tells a fault with progress from one without. */
  committed: CheckpointSummary | null = null;
  constructor(
    readonly code: StreamTransportCode,
    message: string,
    readonly retryAfterMs?: number,
  ) {
    super(message);
  }
}
