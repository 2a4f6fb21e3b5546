// The contract between the workflow and its activities: types, emptyCounters and the readers of counters and run
// reports (pure, no I/O), the values workflow code may import from the activities' room. Nothing here carries a
// secret: the API key and the stream URL come from the worker's configuration.
import type { HeldQuarantineItem } from '../domain/outcomes.js';
import type { ErrorCode, History, ResetReason, StreamFilter } from '../protocol/codec.js';
import type { ProgressReport } from '../protocol/progress.js';

export type { BindingDecision, DecisionAudit, GapDecision, QuarantineDecision } from '../domain/decisions.js';
export type { ConsumerPruning, MaintenanceProgress, MaintenanceReport } from '../db/retention.js';

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
  return isCounters(counters) ? counters : null;
}

/** The database's side of a consumer as a run last knew it: the committed version and the row's lifetime totals. */
export interface CommittedTotals {
  version: number;
  checkpointsCommitted: number;
  eventsApplied: number;
}

/**
 * A streaming run's account of itself, in its heartbeats, its progress signals, its outcome and its failure: its
 * counters so far (each report replaces the one before; the run's ending is its last) and the database's totals
 * after its last commit.
 */
export interface RunReport {
  /**
   * The run's lease epoch: tells its reports from another run's (a late signal of a run that already ended); null
   * in the heartbeats of older workers, which did not say.
   */
  leaseEpoch: number | null;
  counters: StreamCounters;
  /** null when the database's row carries no totals (a store that does not read them). */
  totals: CommittedTotals | null;
}

/** A run report as a signal, a heartbeat or a failure may carry one: anything else is none. */
export function asRunReport(value: unknown): RunReport | null {
  if (typeof value !== 'object' || value === null) return null;
  const { leaseEpoch, counters, totals } = value as Record<string, unknown>;
  if (!isCounters(counters)) return null;
  return {
    leaseEpoch: typeof leaseEpoch === 'number' ? leaseEpoch : null,
    counters,
    totals: isTotals(totals) ? totals : null,
  };
}

/** A page run's counters; the backfill sums them over its runs. */
export interface PageCounters {
  requests: number;
  pages: number;
  chunks: number;
  applied: number;
  /** Events of the page at or below the applied position, matched to their receipts. */
  recognised: number;
  duplicates: number;
  noEffect: number;
  quarantined: number;
}

export function emptyPageCounters(): PageCounters {
  return { requests: 0, pages: 0, chunks: 0, applied: 0, recognised: 0, duplicates: 0, noEffect: 0, quarantined: 0 };
}

const COUNTER_FIELDS = ['sessions', 'checkpointsCommitted', 'eventsApplied', 'duplicates', 'acksSent'] as const;

export function isCounters(value: unknown): value is StreamCounters {
  if (typeof value !== 'object' || value === null) return false;
  const fields = value as Record<string, unknown>;
  return COUNTER_FIELDS.every((name) => typeof fields[name] === 'number');
}

function isTotals(value: unknown): value is CommittedTotals {
  if (typeof value !== 'object' || value === null) return false;
  const fields = value as Record<string, unknown>;
  return (['version', 'checkpointsCommitted', 'eventsApplied'] as const).every((n) => typeof fields[n] === 'number');
}

/** The progress signal's payload: a reading, the alert figures, and the run's report (absent from older workers). */
export interface StreamProgressReport extends ProgressReport {
  run?: RunReport;
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
  /** The run's lease epoch and the database's totals (RunReport); absent in heartbeats of older workers. */
  leaseEpoch?: number | null;
  totals?: CommittedTotals | null;
}

interface OutcomeBase {
  committed: CheckpointSummary;
  counters: StreamCounters;
  /** The run's lease epoch and the database's totals after its last commit (absent from older workers). */
  leaseEpoch?: number | null;
  totals?: CommittedTotals | null;
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
