// What the streaming run depends on, and the logger every activity writes to: a leaf, so that the run
// (consume-stream.ts) and its connections (stream-connection.ts) both read these without importing each other.
import type { Backoff } from '../protocol/backoff.js';
import type { ProgressReading } from '../protocol/progress.js';
import type { StagingLimits } from '../protocol/staging.js';
import type { ActionRules, CheckpointPlan, CommittedState, QuarantinePolicy } from '../protocol/types.js';
import type { CheckpointOutcome } from '../db/commit-types.js';
import type { RecentExecutions, RecentExecutionsBudget } from '../db/recent-executions.js';
import type { SharedBudget } from '../protocol/shared-budget.js';
import type { LeaseAttempt, LeaseRequest } from '../db/state.js';
import type { ConsumerMetrics } from './metrics.js';
import type { RunReport, StreamCounters, StreamHeartbeat } from './types.js';

export interface ConsumeStreamLog {
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

export interface ConsumeStreamConfig {
  url: string;
  apiKey: string;
  maxFrameBytes: number;
  staging: StagingLimits;
  quarantinePolicy: QuarantinePolicy;
  actions: ActionRules;
  heartbeatEveryMs: number;
  connectTimeoutMs: number;
  reconnect: Backoff;
  /**
   * A commit still unfinished after this long fails the run (retried from the committed checkpoint) rather than
   * heartbeating a frozen position; its result, should it come, is never ACKed. Unbounded when omitted.
   */
  commitBoundMs?: number;
}

export interface ConsumeStreamDeps {
  /** db functions bound to a pool */
  store: {
    /**
     * With `existingOnly`, a consumer without a row gets none (null): nothing is written. With `attempt`, refused
     * (StaleLeaseAttempt) when a later attempt of the same activity holds the lease.
     */
    acquireLease(consumerId: string, request: LeaseRequest): Promise<CommittedState | null>;
    /**
     * Commits consecutive checkpoints of one session (one, or a run that waited behind an earlier commit):
     * plans[0].fence is the fence, each later plan is fenced on the version the previous one commits. One outcome
     * per plan, in order, up to the first that did not commit (db commitCheckpoints). `recent`: the run's
     * RecentExecutions, for the store to use and keep current.
     */
    commitCheckpoints(plans: readonly CheckpointPlan[], recent?: RecentExecutions): Promise<CheckpointOutcome[]>;
    /** Saves the retention floor a `hello` announced, for maintenance (db recordRetentionFloor). */
    recordFloor?(consumerId: string, history: { id: string; floor: number }): Promise<void>;
  };
  config: ConsumeStreamConfig;
  log: ConsumeStreamLog;
  /** Where commits, ACKs, reconnects and the head seen are reported (default: nowhere). */
  metrics?: ConsumerMetrics;
  /**
   * The budget the recent-executions caches of this process's runs share (createActivities makes one per worker);
   * without it each run keeps RECENT_EXECUTIONS_CAPACITY.
   */
  recentExecutions?: RecentExecutionsBudget;
  /**
   * The budget of waiting events this process's runs share (createActivities makes one per worker, stagingBudget);
   * without it each run may keep STAGING_MAX_EVENTS waiting.
   */
  staging?: SharedBudget;
  /** Test cut points (kill -9 between stage, commit and ACK; a freeze inside the commit, given to the store). */
  hooks?: {
    afterStage?(position: number): void | Promise<void>;
    insideCommit?(position: number): void | Promise<void>;
    afterCommit?(position: number): void | Promise<void>;
    afterAck?(position: number): void | Promise<void>;
  };
}

export interface ConsumeStreamContext {
  heartbeat(details: StreamHeartbeat): void;
  /**
   * Offered every reading the run heartbeats, with the run's report of itself; passes some on to the workflow
   * (activities/progress-reporter.ts).
   */
  report?(reading: ProgressReading, run: RunReport): void;
  signal: AbortSignal;
  /**
   * This run retries an attempt that stopped heartbeating (its worker killed or frozen): the run's number of
   * attempts so far and the counters of the last heartbeat it sent, which this attempt goes on from.
   */
  takeover?: { attempt: number; counters: StreamCounters | null };
  /** The Temporal attempt running this run: a late start of an earlier attempt is refused the lease. */
  attempt?: LeaseAttempt;
}
