// How the workflow reads a failed streaming run (docs/protocol.md §6, issue: a fault that repeats must escalate, a
// crash must not). A run that timed out lost its worker (killed, vanished, hung): the next run takes over at once
// and the lease epoch fences any zombie, so crashes are never counted and never waited on. Every other failure is a
// fault: counted while the committed position does not move forward, waited on with a growing backoff, and past
// the bound the consumer stops with the fault named. Pure: no workflow APIs, so it is unit-tested directly.
import { ActivityFailure, ApplicationFailure, CancelledFailure, TimeoutFailure } from '@temporalio/common';
import { FailureType, knownFailureType, unhandledFailureType } from '../activities/types-failures.js';
import { asRunReport, type CheckpointSummary, type RunReport } from '../activities/types.js';

export type RunFailure =
  | { kind: 'cancelled' }
  /** the worker running the lease is gone: take over at once */
  | {
      kind: 'crash';
      description: string;
      /** the lost run's report as of its last heartbeat (none if it never heartbeated) */
      lastRun: RunReport | null;
    }
  /** the operator must fix the cause before anything can run */
  | { kind: 'stop'; type: string; message: string }
  | {
      kind: 'fault';
      /** the failure's type, e.g. `StreamTransportError` (its message starts with the code) */
      type: string;
      message: string;
      /** the committed checkpoint when the run gave up, when the run said so */
      committed: CheckpointSummary | null;
      /** the server asked to wait at least this long */
      retryAfterMs: number | null;
      /** what the run did until it failed (none when it failed before its lease, or from an older worker) */
      run: RunReport | null;
      /** a StorageFailure because the database went away: wait until it answers again */
      connectionLost: boolean;
    };

export function classifyRunFailure(error: unknown): RunFailure {
  const cause = error instanceof ActivityFailure && error.cause ? error.cause : error;
  if (cause instanceof CancelledFailure) return { kind: 'cancelled' };
  if (cause instanceof TimeoutFailure) {
    return {
      kind: 'crash',
      description: `${(cause.timeoutType ?? 'unknown').toLowerCase()} timeout`,
      lastRun: asRunReport(cause.lastHeartbeatDetails),
    };
  }
  const message = cause instanceof Error ? cause.message : String(cause);
  if (cause instanceof ApplicationFailure) {
    const type = cause.type ?? 'ApplicationFailure';
    if (needsOperator(knownFailureType(cause.type))) return { kind: 'stop', type, message };
    return { kind: 'fault', type, message, ...failureDetails(cause.details?.[0]) };
  }
  return {
    kind: 'fault',
    type: cause instanceof Error ? cause.name : 'error',
    message,
    committed: null,
    retryAfterMs: null,
    run: null,
    connectionLost: false,
  };
}

/**
 * A run's failure that needs an operator (the activity marks it non-retryable too); the stream consumer stops on it,
 * and so does the backfill (whose page run raises only ConfigError of these).
 */
export function needsOperator(type: FailureType | null): boolean {
  switch (type) {
    case FailureType.DatabaseBehind:
    case FailureType.ConfigError:
      return true;
    case FailureType.StreamTransportError:
    case FailureType.LeaseLost:
    case FailureType.StaleLeaseAttempt:
    case FailureType.StorageFailure:
    case FailureType.InvalidDecision:
    case FailureType.PageSourceUnavailable:
    case FailureType.GenerationNotReached:
    case null:
      return false;
    default:
      return unhandledFailureType(type);
  }
}

type FailureDetails = Pick<
  Extract<RunFailure, { kind: 'fault' }>,
  'committed' | 'retryAfterMs' | 'run' | 'connectionLost'
>;

/**
 * What the activity attaches to a run's failure (`{code, committed, retryAfterMs, run, connectionLost}`, each part
 * where it applies); anything else: none.
 */
function failureDetails(value: unknown): FailureDetails {
  if (typeof value !== 'object' || value === null)
    return { committed: null, retryAfterMs: null, run: null, connectionLost: false };
  const record = value as Record<string, unknown>;
  const committed = record.committed;
  return {
    committed:
      typeof committed === 'object' && committed !== null && 'version' in committed
        ? (committed as CheckpointSummary)
        : null,
    retryAfterMs: typeof record.retryAfterMs === 'number' ? record.retryAfterMs : null,
    run: asRunReport(record.run),
    connectionLost: record.connectionLost === true,
  };
}

/** Forward progress: a committed position beyond the one the fault count was last reset at. */
export function movedForward(base: number | null, position: number | null): boolean {
  return position !== null && (base === null || position > base);
}
