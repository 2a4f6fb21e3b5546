// The consumer's metrics, in one place: what the activities and the worker report, and their Prometheus names.
// They are emitted through the Temporal SDK's metric meter, so the worker's own metrics (task latencies, slots,
// polls) and these share one exporter and one scrape; no second metrics library. Core's Prometheus exporter
// adds `_total` to counters (countersTotalSuffix) and keeps these names otherwise; durations are seconds.
import type { MetricCounter, MetricGauge, MetricHistogram, MetricMeter } from '@temporalio/common';
import type { MaintenanceReport, MaintenanceRunRow, TableSize } from '../db/index.js';
import { suppressedAlerts, type AlertCounts } from '../domain/decide.js';

/** Which consumer committed: the streaming run or the paginated history run. */
export type ConsumerKind = 'stream' | 'pages';
/** Why a consumer's run ended waiting for an operator decision. */
export const AWAITING_DECISION_REASONS = ['reset_required', 'cursor_mismatch', 'held_quarantine'] as const;
export type AwaitingDecisionReason = (typeof AWAITING_DECISION_REASONS)[number];
export type DecisionKind = 'gap' | 'binding' | 'quarantine' | 'alert';

/** The events of one committed checkpoint, by what the commit did with them. */
export interface CommittedEvents {
  applied: number;
  /** Recorded, changed nothing (e.g. a correction older than the saved revision). */
  noEffect: number;
  /** Already committed before (a replay): no new receipt. */
  duplicates: number;
  quarantined: number;
  /** Whale alerts queued, and suppressed by reason. */
  alerts: AlertCounts;
}

/** A maintenance run's statuses (maintenance_runs.status), one series each of the status gauge. */
export const MAINTENANCE_STATUSES = ['running', 'succeeded', 'failed'] as const;

/** Sizes and the last maintenance run, read from the database when the endpoint is scraped. */
export interface RetentionSample {
  tables: readonly Pick<TableSize, 'table' | 'tableBytes' | 'indexBytes'>[];
  lastRun: Pick<MaintenanceRunRow, 'status' | 'finishedAt'> | null;
}

/** Counts read from the database when the endpoint is scraped (shared state, not one process's doing). */
export interface StoreSample {
  outboxPending: number;
  outboxDead: number;
  /** Age of the oldest alert waiting to be sent (0 when none waits). */
  oldestPendingSeconds: number;
  /** Held quarantine records per consumer. */
  quarantineHeld: ReadonlyMap<string, number>;
}

export interface ConsumerMetrics {
  /**
   * A lease began: the run's committed position and version are known and the consumer no longer waits for a
   * decision.
   */
  leaseStarted(consumerId: string, committedPosition: number | null, version: number): void;
  /**
   * A checkpoint was written (the version moved to `version`); one the database already held, committed again
   * without a write, is not one.
   */
  checkpointCommitted(
    consumerId: string,
    kind: ConsumerKind,
    checkpoint: { position: number; version: number },
    events: CommittedEvents,
    seconds: number,
  ): void;
  /** The ACK of a committed checkpoint left, `seconds` after its commit returned. */
  ackSent(consumerId: string, seconds: number): void;
  /** A position the stream showed as existing (hello's head, a batch's position). */
  headSeen(consumerId: string, position: number): void;
  reconnected(consumerId: string, code: string): void;
  awaitingDecision(consumerId: string, reason: AwaitingDecisionReason): void;
  decisionRecorded(consumerId: string, kind: DecisionKind, decision: string): void;
  storeSampled(sample: StoreSample): void;
  retentionSampled(sample: RetentionSample): void;
  /** A maintenance run of this process removed rows (zero when it starts: the series exist from the first run). */
  rowsRemoved(removed: Pick<MaintenanceReport, 'receiptsDeleted' | 'outboxDeleted' | 'revisionsDeleted'>): void;
  /** The outbox dispatcher POSTed an alert, `delaySeconds` after the commit that wrote it, and it was accepted. */
  alertSent(delaySeconds: number): void;
  /** An alert's POST failed; `dead`: it will not be tried again. */
  alertFailed(dead: boolean): void;
}

/** The Prometheus names as scraped (dashboard, alert rules and tests use these). */
export const METRIC_NAMES = {
  eventsCommitted: 'whalehunt_events_committed_total',
  checkpointsCommitted: 'whalehunt_checkpoints_committed_total',
  commitDuration: 'whalehunt_commit_duration_seconds',
  commitToAck: 'whalehunt_commit_to_ack_seconds',
  committedPosition: 'whalehunt_committed_position',
  checkpointVersion: 'whalehunt_checkpoint_version',
  headPosition: 'whalehunt_head_position',
  reconnects: 'whalehunt_reconnects_total',
  quarantineHeld: 'whalehunt_quarantine_held',
  outboxPending: 'whalehunt_outbox_pending',
  outboxDead: 'whalehunt_outbox_dead',
  alertsOldestPending: 'whalehunt_alerts_oldest_pending_seconds',
  alertsSent: 'whalehunt_alerts_sent_total',
  alertsFailed: 'whalehunt_alerts_failed_total',
  alertsDead: 'whalehunt_alerts_dead_total',
  alertsSuppressed: 'whalehunt_alerts_suppressed_total',
  alertDelay: 'whalehunt_alert_delay_seconds',
  decisions: 'whalehunt_decisions_total',
  awaitingDecision: 'whalehunt_consumer_awaiting_decision',
  tableBytes: 'whalehunt_table_bytes',
  tableIndexBytes: 'whalehunt_table_index_bytes',
  maintenanceLastRunEnd: 'whalehunt_maintenance_last_run_end_timestamp_seconds',
  maintenanceLastRunStatus: 'whalehunt_maintenance_last_run_status',
  maintenanceRowsRemoved: 'whalehunt_maintenance_rows_removed_total',
} as const;

/** Commits take milliseconds; Core's default buckets start at 50 ms. Keyed by the name given to the meter. */
export const HISTOGRAM_BUCKETS: Record<string, number[]> = {
  [METRIC_NAMES.commitDuration]: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
  [METRIC_NAMES.commitToAck]: [0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1],
  [METRIC_NAMES.alertDelay]: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
};

/** The head gauge lags the latest head seen by at most this, or until the next commit. */
const HEAD_REPORT_EVERY_MS = 1_000;

/** Counters are created without `_total`: the exporter appends it. */
const counterName = (scraped: string): string => scraped.replace(/_total$/, '');

export function meterMetrics(meter: MetricMeter): ConsumerMetrics {
  const n = METRIC_NAMES;
  const counter = (name: string, description: string): MetricCounter =>
    meter.createCounter(counterName(name), undefined, description);
  const gauge = (name: string, description: string): MetricGauge =>
    meter.createGauge(name, 'int', undefined, description);
  const seconds = (name: string, description: string): MetricHistogram =>
    meter.createHistogram(name, 'float', 's', description);

  const eventsCommitted = counter(n.eventsCommitted, 'Events in committed checkpoints, by what the commit did');
  const checkpointsCommitted = counter(n.checkpointsCommitted, 'Checkpoints committed');
  const commitDuration = seconds(n.commitDuration, 'Time to commit one checkpoint');
  const commitToAck = seconds(n.commitToAck, 'Time from a commit returning to its ACK being sent');
  const committedPosition = gauge(n.committedPosition, 'Position of the last committed checkpoint');
  const checkpointVersion = gauge(n.checkpointVersion, "The checkpoint row's version after this process's last commit");
  const headPosition = gauge(n.headPosition, 'Highest stream position seen (hello head or batch)');
  const reconnects = counter(n.reconnects, 'Stream sessions that ended and reconnected, by code');
  const quarantineHeld = gauge(n.quarantineHeld, 'Held quarantine records waiting for a decision');
  const outboxPending = gauge(n.outboxPending, 'Outbox actions not yet performed (pending or claimed)');
  const outboxDead = gauge(n.outboxDead, 'Outbox actions that failed for good');
  const decisions = counter(n.decisions, 'Operator decisions recorded');
  const alertsOldestPending = gauge(n.alertsOldestPending, 'Age of the oldest whale alert waiting to be sent');
  const alertsSent = counter(n.alertsSent, 'Whale alerts POSTed and accepted by the receiver');
  const alertsFailed = counter(n.alertsFailed, 'Whale alert POSTs that failed (each attempt)');
  const alertsDead = counter(n.alertsDead, 'Whale alerts parked as dead after their last attempt');
  const alertsSuppressed = counter(n.alertsSuppressed, 'Whales recorded but not alerted, by reason');
  const alertDelay = seconds(n.alertDelay, 'Time from the commit that wrote an alert to its POST');
  const awaiting = gauge(n.awaitingDecision, '1 while a consumer waits for an operator decision, by reason');
  const retention = retentionMetrics(counter, gauge);

  const heads = new Map<string, { seen: number; reported: number; reportedAt: number }>();
  const heldReported = new Set<string>();
  const setAwaiting = (consumer: string, active: AwaitingDecisionReason | null): void => {
    for (const reason of AWAITING_DECISION_REASONS) awaiting.set(reason === active ? 1 : 0, { consumer, reason });
  };

  return {
    leaseStarted(consumer, position, version) {
      setAwaiting(consumer, null);
      if (position !== null) committedPosition.set(position, { consumer });
      checkpointVersion.set(version, { consumer });
    },
    checkpointCommitted(consumer, kind, { position, version }, events, duration) {
      checkpointsCommitted.add(1, { consumer, kind });
      const byOutcome = {
        applied: events.applied,
        no_effect: events.noEffect,
        duplicate: events.duplicates,
        quarantined: events.quarantined,
      };
      for (const [outcome, count] of Object.entries(byOutcome)) {
        // Add zero too: every outcome's series exists from the first commit, so rate() sees its start.
        eventsCommitted.add(count, { consumer, kind, outcome });
      }
      for (const [reason, count] of suppressedAlerts(events.alerts)) alertsSuppressed.add(count, { consumer, reason });
      commitDuration.record(duration, { consumer, kind });
      committedPosition.set(position, { consumer });
      checkpointVersion.set(version, { consumer });
      const head = heads.get(consumer);
      if (head !== undefined && head.seen > head.reported) {
        headPosition.set(head.seen, { consumer });
        head.reported = head.seen;
        head.reportedAt = performance.now();
      }
    },
    ackSent(consumer, duration) {
      commitToAck.record(duration, { consumer });
    },
    headSeen(consumer, position) {
      const head = heads.get(consumer);
      if (head !== undefined && position <= head.seen) return;
      const now = performance.now();
      // Every batch of a replay moves the head: report it at most once a second (and with each commit), not once
      // per frame — a gauge write is a call into the native runtime.
      if (head === undefined || now - head.reportedAt >= HEAD_REPORT_EVERY_MS) {
        headPosition.set(position, { consumer });
        heads.set(consumer, { seen: position, reported: position, reportedAt: now });
      } else {
        head.seen = position;
      }
    },
    reconnected(consumer, code) {
      reconnects.add(1, { consumer, code });
    },
    awaitingDecision(consumer, reason) {
      setAwaiting(consumer, reason);
    },
    decisionRecorded(consumer, kind, decision) {
      decisions.add(1, { consumer, kind, decision });
    },
    storeSampled(sample) {
      outboxPending.set(sample.outboxPending);
      outboxDead.set(sample.outboxDead);
      alertsOldestPending.set(Math.round(sample.oldestPendingSeconds));
      // A consumer whose held records were all decided drops to 0 rather than keeping its last count.
      for (const consumer of heldReported) {
        if (!sample.quarantineHeld.has(consumer)) quarantineHeld.set(0, { consumer });
      }
      for (const [consumer, held] of sample.quarantineHeld) {
        quarantineHeld.set(held, { consumer });
        heldReported.add(consumer);
      }
    },
    retentionSampled: retention.sampled,
    rowsRemoved: retention.removed,
    alertSent(delay) {
      alertsSent.add(1);
      alertDelay.record(delay);
    },
    alertFailed(dead) {
      alertsFailed.add(1);
      if (dead) alertsDead.add(1);
    },
  };
}

/** The table sizes, the last maintenance run (from the database) and the rows this process's runs removed. */
function retentionMetrics(
  counter: (name: string, description: string) => MetricCounter,
  gauge: (name: string, description: string) => MetricGauge,
): { sampled: ConsumerMetrics['retentionSampled']; removed: ConsumerMetrics['rowsRemoved'] } {
  const n = METRIC_NAMES;
  const tableBytes = gauge(n.tableBytes, 'Bytes on disk of a consumer table, with its TOAST, without its indexes');
  const indexBytes = gauge(n.tableIndexBytes, "Bytes on disk of a consumer table's indexes");
  const lastEnd = gauge(n.maintenanceLastRunEnd, 'When the last finished maintenance run ended (Unix seconds)');
  const lastStatus = gauge(n.maintenanceLastRunStatus, "1 for the last maintenance run's status, 0 for the others");
  const removed = counter(n.maintenanceRowsRemoved, "Rows this process's maintenance runs removed, by table");
  return {
    sampled(sample) {
      for (const { table, tableBytes: bytes, indexBytes: indexes } of sample.tables) {
        tableBytes.set(bytes, { table });
        indexBytes.set(indexes, { table });
      }
      const last = sample.lastRun;
      if (last === null) return;
      // A run still going keeps the end of the run before it.
      if (last.finishedAt !== null) lastEnd.set(Math.floor(Date.parse(last.finishedAt) / 1000));
      for (const status of MAINTENANCE_STATUSES) lastStatus.set(status === last.status ? 1 : 0, { status });
    },
    removed(rows) {
      removed.add(rows.receiptsDeleted, { table: 'event_receipts' });
      removed.add(rows.outboxDeleted, { table: 'outbox' });
      removed.add(rows.revisionsDeleted, { table: 'execution_revisions' });
    },
  };
}

/** For callers that report nothing (tests of the core, the CLI's one-off commands). */
export const noMetrics: ConsumerMetrics = {
  leaseStarted: () => undefined,
  checkpointCommitted: () => undefined,
  ackSent: () => undefined,
  headSeen: () => undefined,
  reconnected: () => undefined,
  awaitingDecision: () => undefined,
  decisionRecorded: () => undefined,
  storeSampled: () => undefined,
  retentionSampled: () => undefined,
  rowsRemoved: () => undefined,
  alertSent: () => undefined,
  alertFailed: () => undefined,
};
