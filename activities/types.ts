// The contract between the workflow and its activities: types, emptyCounters and heartbeatCounters (pure, no
// I/O), the values workflow code may import from the activities' room. Nothing here carries a secret: the API key
// and the stream URL come from the worker's configuration.
import type { HeldQuarantineItem } from '../domain/outcomes.js';
import type { ErrorCode, History, ResetReason, StreamFilter } from '../protocol/codec.js';

export type { BindingDecision, DecisionAudit, GapDecision, QuarantineDecision } from '../domain/decisions.js';

/** The committed checkpoint as the workflow keeps a copy of it (the database stays the authority). */
export interface CheckpointSummary {
  position: number | null;
  token: string | null;
  generation: number | null;
  version: number;
  filterHash: string | null;
}

/**
 * How the next session starts. `resume` uses the saved token and the saved binding's exact filter;
 * `rebind` the saved token with `filter`; the explicit starts only come from an operator decision or a
 * consumer's explicit first start.
 */
export type StartDirective =
  | { mode: 'resume' }
  | { mode: 'rebind'; filter: StreamFilter }
  | { mode: 'live_cut'; filter: StreamFilter }
  | { mode: 'from_floor'; filter: StreamFilter };

export interface ConsumeStreamInput {
  consumerId: string;
  subscriptionId: string;
  start: StartDirective;
  /** Stream this long, then return `lease_expired` at the next checkpoint boundary. */
  leaseMs: number;
  /** The workflow's copy; when the database is behind it, the activity fails loudly (restored backup or bug). */
  expected: CheckpointSummary | null;
}

export interface StreamCounters {
  sessions: number;
  checkpointsCommitted: number;
  eventsApplied: number;
  duplicates: number;
  acksSent: number;
  /** The latest head seen: the hello's, or a newer batch position (a live batch is at the head). */
  lastHeadPosition: number | null;
  lastCommitAt: string | null;
}

/** Counters of a consumer that has not streamed yet (shared by the activity and the workflow's state). */
export function emptyCounters(): StreamCounters {
  return {
    sessions: 0,
    checkpointsCommitted: 0,
    eventsApplied: 0,
    duplicates: 0,
    acksSent: 0,
    lastHeadPosition: null,
    lastCommitAt: null,
  };
}

/** The counters of a streaming run's heartbeat (`StreamHeartbeat`); anything else: none. */
export function heartbeatCounters(details: unknown): StreamCounters | null {
  if (typeof details !== 'object' || details === null) return null;
  const counters = (details as Record<string, unknown>).counters;
  if (typeof counters !== 'object' || counters === null) return null;
  const fields = counters as Record<string, unknown>;
  const numeric = ['sessions', 'checkpointsCommitted', 'eventsApplied', 'duplicates', 'acksSent'] as const;
  return numeric.every((name) => typeof fields[name] === 'number') ? (counters as StreamCounters) : null;
}

/**
 * The signal the streaming run sends its workflow with a ProgressReading (activities/progress-reporter.ts); the
 * workflow's handler is PROGRESS_SIGNAL in workflows/definitions.ts.
 */
export const PROGRESS_SIGNAL_NAME = 'progress';

/** Small heartbeat details: never a batch, never a token body larger than needed, never the key. */
export interface StreamHeartbeat {
  position: number | null;
  version: number;
  generation: number | null;
  /** The latest head seen, never behind `position`. */
  headPosition: number | null;
  /** When this heartbeat was taken (ISO): what `status` labels its figures with. */
  at: string;
  counters: StreamCounters;
}

interface OutcomeBase {
  committed: CheckpointSummary;
  counters: StreamCounters;
}

/** Protocol stops are returned; transport failures and retryable server errors are thrown (Temporal retries). */
export type ConsumeOutcome =
  | (OutcomeBase & { kind: 'lease_expired' })
  | (OutcomeBase & { kind: 'cancelled' })
  /** A rebind (or explicit start) committed its first checkpoint at the new generation/binding. */
  | (OutcomeBase & { kind: 'rebound'; generation: number })
  | (OutcomeBase & { kind: 'reset_required'; reason: ResetReason; history: History; refusedToken: string })
  | (OutcomeBase & { kind: 'cursor_mismatch'; message: string })
  | (OutcomeBase & { kind: 'held_quarantine'; items: HeldQuarantineItem[] })
  /** Non-retryable server error or local protocol stop an operator must look at. */
  | (OutcomeBase & { kind: 'failed'; code: ErrorCode | 'conflicting_event' | 'config'; message: string });
