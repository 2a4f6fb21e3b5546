// The failure types the activities raise (ApplicationFailure.type) and the workflows read: one vocabulary for both
// sides of the Temporal boundary. A leaf of the activities' contract (like types.ts), so workflow code imports it
// as values. Recorded histories hold these strings: never rename one.
export const FailureType = {
  /** The stream's reconnects ran out, or the server asked to back off (details: the code, a retry-after). */
  StreamTransportError: 'StreamTransportError',
  /** A configuration that cannot work (a consumer of the other kind, a page setting): an operator fixes it. */
  ConfigError: 'ConfigError',
  /** Another attempt owns the consumer's lease: this one is a zombie. */
  LeaseLost: 'LeaseLost',
  /** The database is behind the workflow's copy of the checkpoint: a restored backup or a bug. */
  DatabaseBehind: 'DatabaseBehind',
  /** A later attempt of the same streaming activity took the lease over. */
  StaleLeaseAttempt: 'StaleLeaseAttempt',
  /** The database failed underneath (details: whether the connection was lost). */
  StorageFailure: 'StorageFailure',
  /** A decision that cannot be applied: an unknown consumer, nothing held that matches. */
  InvalidDecision: 'InvalidDecision',
  /** The page source still fails after the page run's own bounded backoff: Temporal retries the run. */
  PageSourceUnavailable: 'PageSourceUnavailable',
  /** A rebind's generation was not committed within the wait. */
  GenerationNotReached: 'GenerationNotReached',
} as const;

export type FailureType = (typeof FailureType)[keyof typeof FailureType];

const FAILURE_TYPES: readonly string[] = Object.values(FailureType);

/** The failure type a failure names; null for any other (an unexpected error's name, or none). */
export function knownFailureType(type: string | null | undefined): FailureType | null {
  return typeof type === 'string' && FAILURE_TYPES.includes(type) ? (type as FailureType) : null;
}

/** The end of an exhaustive switch over failure types: a type added above and not handled fails to compile. */
export function unhandledFailureType(type: never): never {
  throw new Error(`unhandled failure type ${String(type)}`);
}
