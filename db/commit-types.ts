// What a stream consumer's commit answers, shared by the commit's paths (commit.ts, commit-fast.ts,
// unchanged-checkpoint.ts) and the run that keeps its known executions at a fence (recent-executions.ts).
import type { AlertCounts } from '../domain/decide.js';
import type { CommitConflict, CommitHeld } from '../domain/outcomes.js';

export interface CommitResult {
  version: number;
  position: number;
  applied: number;
  duplicates: number;
  noEffect: number;
  quarantined: number;
  /** Whale alerts the commit queued to send, and those it recorded as suppressed (by reason). */
  alerts: AlertCounts;
  qualityUpdated: number;
  outboxed: number;
}

/** The fence of a stream consumer's commit: its lease epoch and checkpoint version. */
export interface CheckpointFence {
  leaseEpoch: number;
  version: number;
}

/** The lease epoch or version moved: another attempt owns the consumer. Nothing written; never overwrite. */
export interface CheckpointFenced {
  kind: 'fenced';
  expected: CheckpointFence;
  /** null: the consumer has no checkpoint row. */
  actual: CheckpointFence | null;
}

export type CheckpointOutcome = ({ kind: 'committed' } & CommitResult) | CheckpointFenced | CommitConflict | CommitHeld;
