// Everything the workflows, the worker and the CLI must agree on: task queue, ids, signals, updates,
// queries and search attributes. Safe to import from workflow code (no I/O, no Node built-ins).
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';
import type { StreamFilter } from '../protocol/codec.js';
import type {
  BindingDecision,
  CheckpointSummary,
  CommittedTotals,
  DecisionAudit,
  GapDecision,
  PageCounters,
  QuarantineDecision,
  RunReport,
  StartDirective,
  StreamCounters,
  StreamProgressReport,
} from '../activities/types.js';
import { PROGRESS_SIGNAL_NAME } from '../activities/types.js';
import type { AlertFigures, ProgressReading, RateSample } from '../protocol/progress.js';

export const TASK_QUEUE = 'whalehunt-consumer';

/** The streaming lease when ConsumerWorkflowInput.leaseMs is not given. */
export const DEFAULT_LEASE_MS = 5 * 60_000;

/**
 * ConsumerTuning.heartbeatTimeoutMs when not given: how long a stopped or frozen lease holder goes unnoticed. The
 * worker heartbeats every second (HEARTBEAT_MS), so a live holder misses it only when its process stalls for
 * seconds; such a false takeover costs one reconnect and is fenced. The worker's idle-in-transaction bound stays
 * below it, so a frozen holder's transaction is gone by the time the next attempt starts.
 */
export const DEFAULT_HEARTBEAT_TIMEOUT_MS = 3_000;

/**
 * The streaming leases' own task queue. Every worker polls it with a single poller, so a frozen worker (SIGSTOP, a
 * VM pause) holds at most one open poll that could take a retried lease it can never start; the workflow queue's
 * many polls are not on the takeover path at all (a timed-out lease is retried by the server, not by the workflow).
 */
export function leaseTaskQueue(taskQueue: string): string {
  return `${taskQueue}-leases`;
}

export function consumerWorkflowId(consumerId: string): string {
  return `whalehunt-consumer:${consumerId}`;
}

export const consumerIdSearchAttribute = defineSearchAttributeKey('WhalehuntConsumerId', SearchAttributeType.KEYWORD);
export const phaseSearchAttribute = defineSearchAttributeKey('WhalehuntPhase', SearchAttributeType.KEYWORD);
/**
 * `stream` (consumerWorkflow), `backfill` (backfillWorkflow) or `maintenance` (maintenanceWorkflow): lets `list` and
 * the UI tell them apart.
 */
export const kindSearchAttribute = defineSearchAttributeKey('WhalehuntKind', SearchAttributeType.KEYWORD);
/** Registered on the dev server and in docker-compose; keep in sync with these keys. */
export const SEARCH_ATTRIBUTES = {
  WhalehuntConsumerId: 'Keyword',
  WhalehuntPhase: 'Keyword',
  WhalehuntKind: 'Keyword',
} as const;

export type WorkflowKind = 'stream' | 'backfill';

export const CONSUMER_PHASES = [
  'streaming',
  'backoff',
  'awaiting_gap_decision',
  'awaiting_binding_decision',
  'awaiting_quarantine_decision',
  'paused',
  'rebinding',
  'completed',
] as const;
export type ConsumerPhase = (typeof CONSUMER_PHASES)[number];

/** A consumer's first start, always explicit: never resumed or jumped to live silently. */
export const INITIAL_STARTS = ['live_cut', 'from_floor'] as const;
export type InitialStart = (typeof INITIAL_STARTS)[number];

export interface ConsumerWorkflowInput {
  consumerId: string;
  subscriptionId: string;
  /** The filter of the first start; later the saved binding's filter is authoritative. */
  filter: StreamFilter;
  initialStart: InitialStart;
  /** How long one streaming activity runs before it returns (bounded lease). */
  leaseMs?: number;
  /** Timeouts and limits; production uses the defaults, tests shorten them. */
  tuning?: ConsumerTuning;
  /** State carried across continue-as-new. */
  carried?: ConsumerCarriedState;
}

export interface ConsumerTuning {
  /** A streaming attempt that stops heartbeating this long is timed out and retried (its lease is fenced). */
  heartbeatTimeoutMs?: number;
  /**
   * Failed streaming runs in a row without forward progress (docs/protocol.md §6) before the consumer stops in `paused`
   * with the fault named. Crashes (a timed-out run) never count: the next run takes over at once.
   */
  maxFaultsWithoutProgress?: number;
  /** The backfill's page runs are retried by Temporal: attempts of one run, and the longest wait between two. */
  maxActivityAttempts?: number;
  maxActivityRetryIntervalMs?: number;
  /** The durable backoff timer after a fault: first delay, doubled per fault without progress up to the maximum. */
  backoffInitialMs?: number;
  backoffMaxMs?: number;
  /** Continue as new after this many streaming runs even if Temporal does not suggest it yet. */
  maxRunsPerExecution?: number;
}

/** What survives continue-as-new. No secrets. */
export interface ConsumerCarriedState {
  committed: CheckpointSummary | null;
  phase: ConsumerPhase;
  pendingRebind: { filter: StreamFilter; requestedBy: string } | null;
  stop: ConsumerStop | null;
  lastError: string | null;
  /** Workflow time of the last error (absent in states carried by older runs). */
  lastErrorAt?: string | null;
  /** The ended runs' counters summed (a running run's are in `live`; see consumerTotals). */
  counters: StreamCounters;
  /** Streaming runs that ended, however they ended. */
  runs: number;
  /** How the next session starts (an explicit start survives until its first commit). */
  start?: StartDirective;
  /** Consecutive backoff rounds, for the growing durable timer. */
  backoffRounds?: number;
  /** The last run lost the database: the backoff waits until it answers rather than on a timer. */
  awaitDatabase?: boolean;
  /** Failed runs since the committed position last moved forward (reset by progress and by a resume). */
  faultsWithoutProgress?: number;
  /** The committed position when the fault count was last reset: only a position beyond it is progress. */
  progressBase?: number | null;
  /** The latest progress reading (a progress signal or a lease's end), with the time it was taken. */
  progress?: ProgressReading | null;
  /** (time, position) samples of the last minute's readings: the rate shown (protocol/progress.ts RateWindow). */
  progressSamples?: RateSample[];
  /** When `counters` last changed (a run's end). */
  countersAt?: string | null;
  /** The running run's latest report (its progress signal), replaced by its final counters when it ends. */
  live?: (RunReport & { at: string }) | null;
  /** The highest lease epoch of a run that ended: a late report of it is never taken as live. */
  endedEpoch?: number | null;
  /** The database's version and totals as the runs last reported them, and when. */
  database?: (CommittedTotals & { at: string }) | null;
  /** The consumer's whale alerts as the streaming run last reported them, and when (absent in older runs). */
  alerts?: (AlertFigures & { at: string }) | null;
}

/** Why the consumer is waiting, and the exact command that resolves it (shown in Current Details). */
export interface ConsumerStop {
  phase: ConsumerPhase | BackfillPhase;
  reason: string;
  resolveWith: string;
  since: string;
}

export interface ConsumerStatus extends ConsumerCarriedState {
  consumerId: string;
  subscriptionId: string;
  filter: StreamFilter;
}

export interface GapResolution extends DecisionAudit {
  decision: GapDecision;
}
export interface BindingResolution extends DecisionAudit {
  decision: BindingDecision;
}
export interface QuarantineResolution extends DecisionAudit {
  decision: QuarantineDecision;
  /** All held events when omitted. */
  eventIds?: string[];
}
export interface RebindRequest {
  filter: StreamFilter;
  requestedBy: string;
  /** Workflow id to notify with `rebindRejected` when the consumer cannot rebind now (set by rebindWorkflow). */
  replyTo?: string;
}

/** Sent back to a RebindRequest's `replyTo` when the consumer refuses the rebind (awaits a decision, paused, ...). */
export interface RebindRejection {
  consumerId: string;
  phase: ConsumerPhase;
  reason: string;
}

export const resolveGapSignal = defineSignal<[GapResolution]>('resolveGap');
export const resolveBindingSignal = defineSignal<[BindingResolution]>('resolveBinding');
export const resolveQuarantineSignal = defineSignal<[QuarantineResolution]>('resolveQuarantine');
export const pauseSignal = defineSignal<[DecisionAudit]>('pause');
export const resumeSignal = defineSignal<[DecisionAudit]>('resume');
export const rebindSignal = defineSignal<[RebindRequest]>('rebind');

/** Updates mirror the decision signals but reject invalid decisions synchronously, before they reach history. */
export const resolveGapUpdate = defineUpdate<ConsumerStatus, [GapResolution]>('resolveGapUpdate');
export const resolveBindingUpdate = defineUpdate<ConsumerStatus, [BindingResolution]>('resolveBindingUpdate');
export const resolveQuarantineUpdate = defineUpdate<ConsumerStatus, [QuarantineResolution]>('resolveQuarantineUpdate');
export const rebindUpdate = defineUpdate<ConsumerStatus, [RebindRequest]>('rebindUpdate');

/**
 * The streaming run's latest reading, at most every 20 s (activities/progress-reporter.ts), with its consumer's
 * alert figures: keeps Current Details and the status query live between leases.
 */
export const PROGRESS_SIGNAL = defineSignal<[StreamProgressReport]>(PROGRESS_SIGNAL_NAME);

export const rebindRejectedSignal = defineSignal<[RebindRejection]>('rebindRejected');

export const statusQuery = defineQuery<ConsumerStatus>('status');

export interface RebindWorkflowInput {
  consumerId: string;
  filter: StreamFilter;
  requestedBy: string;
}

// ---- the backfill (the paginated history source, docs/protocol.md §8) ----------------------------------

export function backfillWorkflowId(consumerId: string): string {
  return `whalehunt-backfill:${consumerId}`;
}

export const BACKFILL_PHASES = [
  'backfilling',
  'backoff',
  /** At the source's head below the target, or tailing: a durable timer, then the next page. */
  'at_head',
  'awaiting_gap_decision',
  'awaiting_quarantine_decision',
  'paused',
  'handing_over',
  'completed',
] as const;
export type BackfillPhase = (typeof BACKFILL_PHASES)[number];

/** Pages asked per activity run when BackfillWorkflowInput.pagesPerRun is not given. */
export const DEFAULT_PAGES_PER_RUN = 50;

export interface BackfillWorkflowInput {
  consumerId: string;
  /** Fixed per page consumer: the source binds cursors to it. */
  filter: StreamFilter;
  /** The paged stream; the worker's PAGE_STREAM when omitted. */
  stream?: string;
  /** Pages per activity run (a bounded run: the workflow's history grows by a few events per run). */
  pagesPerRun?: number;
  /** When set, the live stream consumer of the same id and filter starts once the backfill reached its target. */
  thenStream?: { subscriptionId: string; leaseMs?: number };
  /**
   * The target, a journal position: the backfill completes (or hands over) once its applied position reaches it.
   * Default: the source's head when the backfill starts (the `history.head` of its first page).
   */
  until?: number;
  /**
   * No target: keep paging as the history grows, waiting at the head on a growing durable timer; the backfill never
   * completes by itself, so `until` and `thenStream` are not used.
   */
  tail?: boolean;
  tuning?: ConsumerTuning;
  carried?: BackfillCarriedState;
}

/** Where a backfill completes: fixed when it starts, kept across continue-as-new. */
export interface BackfillTarget {
  position: number;
  /** The history the position belongs to; null until a page binds it. */
  historyId: string | null;
  /** `head`: the source's head at the backfill's first page; `until`: given with the start (`--until`). */
  source: 'head' | 'until';
  /** Workflow time it was fixed (null: given with the start). */
  fixedAt: string | null;
}

/** What survives continue-as-new. No secrets, never a page. */
export interface BackfillCarriedState {
  phase: BackfillPhase;
  /** The saved progress as the last run reported it (the database stays the authority). */
  progress: { resumeCursor: string | null; appliedPosition: number; version: number } | null;
  /** The page runs' counters, summed. */
  counters: PageCounters;
  runs: number;
  stop: ConsumerStop | null;
  lastError: string | null;
  backoffRounds: number;
  /** How the backfill ended: caught up, abandoned, handed over to `whalehunt-consumer:<id>`. */
  ending: string | null;
  /** The target (absent in states carried by older runs; null: not fixed yet, or tailing). */
  target?: BackfillTarget | null;
  /** The source's head as the last run saw it (`history.head` of its last page answer). */
  sourceHead?: number | null;
  /** Waits at the head in a row: the growing durable timer of `at_head`. */
  headWaits?: number;
  /** While waiting at the head: why, and when the next page is asked (workflow time). */
  waiting?: { reason: string; until: string } | null;
  /** The handover to the live stream consumer, once done. */
  handover?: { workflowId: string; appliedPosition: number; target: number | null; at: string } | null;
}

export interface BackfillStatus extends BackfillCarriedState {
  kind: 'backfill';
  consumerId: string;
  filter: StreamFilter;
  stream: string | null;
  thenStream: BackfillWorkflowInput['thenStream'] | null;
  /** The start's explicit target (`--until`), else null. */
  until: number | null;
  /** Tailing: no target, never completes by itself. */
  tail: boolean;
}

/** The same wire names as the consumer's (`status`, `resolveGapUpdate`, `resolveQuarantineUpdate`): one CLI. */
export const backfillStatusQuery = defineQuery<BackfillStatus>('status');
export const backfillResolveGapUpdate = defineUpdate<BackfillStatus, [GapResolution]>('resolveGapUpdate');
export const backfillResolveQuarantineUpdate = defineUpdate<BackfillStatus, [QuarantineResolution]>(
  'resolveQuarantineUpdate',
);

// ---- maintenance (retention, docs/design.md#retention) --------------------------------------------------

/** The Temporal Schedule the worker creates at start (MAINTENANCE_EVERY) for the default task queue. */
export const MAINTENANCE_SCHEDULE_ID = 'whalehunt-maintenance';

/**
 * The schedule of the deployment polling `taskQueue`: a deployment on a task queue of its own (its own database)
 * gets a schedule of its own, so one never starts maintenance on another's workers.
 */
export function maintenanceScheduleId(taskQueue: string): string {
  return taskQueue === TASK_QUEUE ? MAINTENANCE_SCHEDULE_ID : `${MAINTENANCE_SCHEDULE_ID}:${taskQueue}`;
}

/** Workflow ids of maintenance runs: the schedule's (Temporal appends the scheduled time) and the CLI's. */
export const MAINTENANCE_WORKFLOW_ID_PREFIX = 'whalehunt-maintenance-run:';

export const MAINTENANCE_KIND = 'maintenance';
export const MAINTENANCE_PHASES = ['maintaining', 'maintained', 'failed'] as const;
export type MaintenancePhase = (typeof MAINTENANCE_PHASES)[number];

export interface MaintenanceWorkflowInput {
  /** Who asked: `schedule <id>` or the CLI's actor; shown in Current Details. */
  requestedBy: string;
}
