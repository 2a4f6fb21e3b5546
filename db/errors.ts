// Typed outcomes of the commit path. Callers branch on `code`, never on messages.
import type { QuarantineReason } from '../protocol/types.js';

export type CommitErrorCode = 'fenced' | 'conflicting_event' | 'held_quarantine' | 'invalid_plan';

export abstract class CommitError extends Error {
  abstract readonly code: CommitErrorCode;
}

/** The lease epoch or version moved: another attempt owns the consumer. Reread state; never overwrite. */
export class Fenced extends CommitError {
  readonly code = 'fenced' as const;
  override readonly name = 'Fenced';
  constructor(
    readonly consumerId: string,
    readonly expected: { leaseEpoch: number; version: number },
    readonly actual: { leaseEpoch: number; version: number } | null,
  ) {
    super(
      `commit fenced for consumer ${consumerId}: expected lease ${expected.leaseEpoch} version ${expected.version}, ` +
        (actual ? `found lease ${actual.leaseEpoch} version ${actual.version}` : 'consumer has no checkpoint row'),
    );
  }
}

/** Same eventId, different content: the whole checkpoint is refused and not ACKed. */
export class ConflictingEvent extends CommitError {
  readonly code = 'conflicting_event' as const;
  override readonly name = 'ConflictingEvent';
  constructor(
    readonly eventId: string,
    readonly savedHash: string,
    readonly incomingHash: string,
  ) {
    super(`event ${eventId} conflicts with its saved receipt: saved content ${savedHash}, incoming ${incomingHash}`);
  }
}

export interface HeldQuarantineItem {
  eventId: string;
  entityId: string;
  kind: string;
  position: number;
  reason: QuarantineReason;
}

/** Events the reducer cannot apply were recorded as held; the checkpoint did not advance. */
export class HeldQuarantine extends CommitError {
  readonly code = 'held_quarantine' as const;
  override readonly name = 'HeldQuarantine';
  constructor(readonly items: HeldQuarantineItem[]) {
    super(
      `checkpoint held by ${items.length} quarantined event(s): ` +
        items
          .slice(0, 5)
          .map((i) => `${i.eventId} (${i.reason}, ${i.kind} ${i.entityId} at ${i.position})`)
          .join(', '),
    );
  }
}

/** The plan itself is wrong (positions backwards, empty token, …): nothing was written. */
export class InvalidPlan extends CommitError {
  readonly code = 'invalid_plan' as const;
  override readonly name = 'InvalidPlan';
  constructor(readonly reason: string) {
    super(`invalid checkpoint plan: ${reason}`);
  }
}

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
