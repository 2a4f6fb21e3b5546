// The consumer workflow's long-lived state as a plain class: what the workflow drives, what survives
// continue-as-new, what the status query answers and what Current Details shows. Pure (no Temporal
// APIs), so it is unit-tested directly; the workflow supplies the clock (workflow time).
import type { CommittedView } from '../activities/index.js';
import type {
  CheckpointSummary,
  CommittedTotals,
  ConsumeOutcome,
  RunReport,
  StartDirective,
  StreamCounters,
  StreamProgressReport,
} from '../activities/types.js';
import { asRunReport, emptyCounters } from '../activities/types.js';
import type { StreamFilter } from '../protocol/codec.js';
import {
  formatAlerts,
  formatCount,
  formatTime,
  isAlertFigures,
  latestReading,
  progressFigures,
  progressReading,
  RateWindow,
  type AlertFigures,
  type ProgressReading,
} from '../protocol/progress.js';
import { movedForward } from './run-failure.js';
import { stopResolution, waitingDetails, waitingStop, type Resolution } from './commands.js';
import type {
  ConsumerCarriedState,
  ConsumerPhase,
  ConsumerStatus,
  ConsumerStop,
  ConsumerWorkflowInput,
} from './definitions.js';

/** Phases in which the workflow runs the streaming activity (or waits to run it again). */
export const RUNNING_PHASES: readonly ConsumerPhase[] = ['streaming', 'rebinding', 'backoff'];

/** A consumer's totals as every display shows them (Current Details, `status`, `status --json`). */
export interface ConsumerTotals extends StreamCounters {
  /**
   * The committed version `checkpointsCommitted` and `eventsApplied` are the database's totals at; null when no run
   * reported them and they are the runs' own counts.
   */
  version: number | null;
}

/**
 * The ended runs' counters plus the running run's latest report (`running`: the workflow's, or a fresher one such
 * as its heartbeat), with the checkpoints and events the database counts at the newest version any source gave.
 */
export function consumerTotals(
  state: Pick<ConsumerCarriedState, 'counters' | 'live' | 'database'>,
  running: RunReport | null = state.live ?? null,
  database: CommittedTotals | null = null,
): ConsumerTotals {
  const ended = state.counters;
  const live = running?.counters;
  const sum = (key: 'sessions' | 'checkpointsCommitted' | 'eventsApplied' | 'duplicates' | 'acksSent'): number =>
    ended[key] + (live?.[key] ?? 0);
  const counted = [state.database ?? null, running?.totals ?? null, database].reduce<CommittedTotals | null>(
    (newest, t) => (t !== null && (newest === null || t.version > newest.version) ? t : newest),
    null,
  );
  return {
    sessions: sum('sessions'),
    checkpointsCommitted: counted?.checkpointsCommitted ?? sum('checkpointsCommitted'),
    eventsApplied: counted?.eventsApplied ?? sum('eventsApplied'),
    duplicates: sum('duplicates'),
    acksSent: sum('acksSent'),
    lastHeadPosition: live?.lastHeadPosition ?? ended.lastHeadPosition,
    lastCommitAt: live?.lastCommitAt ?? ended.lastCommitAt,
    version: counted?.version ?? null,
  };
}

/** Of two reports of one run, the one further on (its counters only grow); the first when they are not one run's. */
export function furtherReport(a: RunReport | null, b: RunReport | null): RunReport | null {
  if (a === null || b === null || a.leaseEpoch !== b.leaseEpoch) return a ?? b;
  const weight = (r: RunReport): number =>
    r.counters.sessions + r.counters.checkpointsCommitted + r.counters.eventsApplied + r.counters.acksSent;
  return weight(b) > weight(a) ? b : a;
}

export class ConsumerState {
  readonly consumerId: string;
  readonly subscriptionId: string;
  /** The filter of the active binding (after a rebind, the new one). */
  filter: StreamFilter;
  phase: ConsumerPhase;
  committed: CheckpointSummary | null;
  start: StartDirective;
  pendingRebind: { filter: StreamFilter; requestedBy: string } | null;
  stop: ConsumerStop | null;
  lastError: string | null;
  lastErrorAt: string | null;
  /** The ended runs' counters summed; the running run's are in `live` (consumerTotals adds them). */
  counters: StreamCounters;
  /** Streaming runs that ended over the consumer's whole life (all executions), however they ended. */
  runs: number;
  backoffRounds: number;
  /** The last run lost the database: the backoff waits until it answers rather than on a timer. */
  awaitDatabase: boolean;
  faultsWithoutProgress: number;
  progressBase: number | null;
  /** The latest reading of position and head (a progress signal or a lease's end). */
  progress: ProgressReading | null;
  readonly rate: RateWindow;
  /** When `counters` last changed (a run's end), for the label Current Details gives them. */
  countersAt: string | null;
  /** The running run's latest report (a progress signal), replaced by its final counters when it ends. */
  live: (RunReport & { at: string }) | null;
  /** The highest lease epoch of a run that ended: a late report of it is never taken as live. */
  endedEpoch: number | null;
  /** The database's version and totals as the runs last reported them, and when. */
  database: (CommittedTotals & { at: string }) | null;
  /** The consumer's whale alerts as the streaming run last reported them (a progress signal), and when. */
  alerts: (AlertFigures & { at: string }) | null;

  constructor(input: ConsumerWorkflowInput) {
    const carried = input.carried;
    this.consumerId = input.consumerId;
    this.subscriptionId = input.subscriptionId;
    this.filter = input.filter;
    this.phase = carried?.phase ?? 'streaming';
    this.committed = carried?.committed ?? null;
    this.start =
      carried?.start ??
      (this.committed?.token ? { mode: 'resume' } : { mode: input.initialStart, filter: input.filter });
    this.pendingRebind = carried?.pendingRebind ?? null;
    this.stop = carried?.stop ?? null;
    this.lastError = carried?.lastError ?? null;
    this.lastErrorAt = carried?.lastErrorAt ?? null;
    this.counters = carried?.counters ?? emptyCounters();
    this.runs = carried?.runs ?? 0;
    this.backoffRounds = carried?.backoffRounds ?? 0;
    this.awaitDatabase = carried?.awaitDatabase ?? false;
    this.faultsWithoutProgress = carried?.faultsWithoutProgress ?? 0;
    this.progressBase = carried?.progressBase ?? null;
    this.progress = carried?.progress ?? null;
    this.rate = new RateWindow(undefined, carried?.progressSamples ?? []);
    this.countersAt = carried?.countersAt ?? null;
    this.live = carried?.live ?? null;
    this.endedEpoch = carried?.endedEpoch ?? null;
    this.database = carried?.database ?? null;
    this.alerts = carried?.alerts ?? null;
  }

  /**
   * A reading from the streaming run (or a lease's end); an older one than the one held is ignored. The alert
   * figures a progress signal carries are kept apart: a lease's end reports none, and must not hide them. So is
   * the run's report of itself: its counters become the live ones, its totals the database's.
   */
  noteReading(report: StreamProgressReport): void {
    const { alerts, takeoverAttempt, run, ...reading } = report;
    if (typeof takeoverAttempt === 'number') {
      this.noteError(`streaming run lost its worker (heartbeat timeout); attempt ${takeoverAttempt} took over at once`);
    }
    const ran = asRunReport(run);
    if (ran !== null) this.noteRunReport(ran, reading.at);
    this.progress = latestReading(this.progress, reading);
    this.rate.addReading(reading);
    if (isAlertFigures(alerts) && (this.alerts === null || Date.parse(reading.at) > Date.parse(this.alerts.at))) {
      this.alerts = {
        pending: alerts.pending,
        dead: alerts.dead,
        oldestPendingSeconds: alerts.oldestPendingSeconds,
        at: reading.at,
      };
    }
  }

  /** Positions per second over the last minute; 0 outside the running phases, where nothing is consumed. */
  rateAt(nowMs: number): number | null {
    return RUNNING_PHASES.includes(this.phase) ? this.rate.rate(nowMs) : 0;
  }

  /** An error an operator should see, with when it happened (workflow time), until a run succeeds. */
  noteError(message: string): void {
    this.lastError = message;
    this.lastErrorAt = new Date().toISOString();
  }

  clearError(): void {
    this.lastError = null;
    this.lastErrorAt = null;
  }

  /**
   * The running run's report (taken at `at`): its counters replace the live ones, unless it comes from a run that
   * already ended (a signal delivered after the run's ending, which counted it), from an attempt the live one took
   * over from (it goes on from that attempt's counters), or is older than the one held.
   */
  noteRunReport(run: RunReport, at: string): void {
    if (run.leaseEpoch !== null && this.endedEpoch !== null && run.leaseEpoch <= this.endedEpoch) return;
    const live = this.live;
    if (live !== null && run.leaseEpoch !== null && live.leaseEpoch !== null && run.leaseEpoch < live.leaseEpoch)
      return;
    if (live !== null && live.leaseEpoch === run.leaseEpoch && Date.parse(at) <= Date.parse(live.at)) return;
    this.live = { ...run, at };
    this.noteTotals(run.totals, at);
  }

  /** The database's totals as a run reported them; they only grow with the version. */
  private noteTotals(totals: CommittedTotals | null, at: string): void {
    const held = this.database;
    if (totals === null) return;
    if (held !== null && (totals.version < held.version || (totals.version === held.version && at <= held.at))) return;
    this.database = { ...totals, at };
  }

  /**
   * A streaming run ended, however: with an outcome, a fault, a fence, a timeout or a crash. Its counters (its last
   * word, or the live report when that is further on or all there is) join the totals; nothing of it stays live.
   */
  endRun(run: RunReport | null, nowMs: number): void {
    const final = furtherReport(run, this.live);
    const at = new Date(nowMs).toISOString();
    if (final !== null) {
      this.addCounters(final.counters);
      if (final.leaseEpoch !== null) this.endedEpoch = Math.max(this.endedEpoch ?? 0, final.leaseEpoch);
      this.noteTotals(final.totals, at);
    }
    this.live = null;
    this.runs += 1;
    this.countersAt = at;
  }

  /** The consumer's totals now: ended runs, the running one's latest report, the database's counts. */
  totals(): ConsumerTotals {
    return consumerTotals(this);
  }

  /** The fault count starts over when the committed position moved beyond the one it was last reset at. */
  noteProgress(): void {
    const position = this.committed?.position ?? null;
    if (!movedForward(this.progressBase, position)) return;
    this.progressBase = position;
    this.faultsWithoutProgress = 0;
  }

  /** One more failed run without progress; returns the count. */
  countFault(): number {
    this.faultsWithoutProgress += 1;
    return this.faultsWithoutProgress;
  }

  /** The phase a session with the current start directive runs in. */
  runningPhase(): ConsumerPhase {
    return this.start.mode === 'rebind' ? 'rebinding' : 'streaming';
  }

  /** Takes the run's outcome: the committed summary is the database's word and replaces the copy. */
  adopt(outcome: ConsumeOutcome, nowMs: number): void {
    this.committed = outcome.committed;
    // The run's last word on position and head; a run that saw no hello keeps the head seen before.
    const head = outcome.counters.lastHeadPosition ?? this.progress?.head ?? this.counters.lastHeadPosition;
    this.noteReading(progressReading(outcome.committed.position, head, nowMs));
    this.backoffRounds = 0;
    this.endRun(
      { leaseEpoch: outcome.leaseEpoch ?? null, counters: outcome.counters, totals: outcome.totals ?? null },
      nowMs,
    );
  }

  private addCounters(c: StreamCounters): void {
    this.counters = {
      sessions: this.counters.sessions + c.sessions,
      checkpointsCommitted: this.counters.checkpointsCommitted + c.checkpointsCommitted,
      eventsApplied: this.counters.eventsApplied + c.eventsApplied,
      duplicates: this.counters.duplicates + c.duplicates,
      acksSent: this.counters.acksSent + c.acksSent,
      lastHeadPosition: c.lastHeadPosition ?? this.counters.lastHeadPosition,
      lastCommitAt: c.lastCommitAt ?? this.counters.lastCommitAt,
    };
  }

  /**
   * Takes the database's committed view (read, or returned by the activity that recorded a decision): its summary
   * and binding, and the start it records. A recorded explicit start holds until its first commit; without one, a
   * consumer with a checkpoint resumes it (or starts its requested rebind) and one without keeps its first start.
   */
  adoptCommitted(view: CommittedView): void {
    if (view.summary.token !== null) {
      if (view.filter) this.filter = view.filter;
      this.committed = view.summary;
    }
    if (view.pendingStart) this.start = { mode: view.pendingStart, filter: this.startFilter() };
    else if (view.summary.token !== null && this.start.mode !== 'rebind') this.start = { mode: 'resume' };
  }

  /** An explicit start or a rebind committed its first checkpoint: from now on, resume that binding. */
  rebound(): void {
    if (this.start.mode !== 'resume') this.filter = this.start.filter;
    this.start = { mode: 'resume' };
    this.pendingRebind = null;
    this.stop = null;
    this.phase = 'streaming';
  }

  /** The filter an explicit start taken now should use: a pending rebind's, else the active one. */
  startFilter(): StreamFilter {
    return this.pendingRebind?.filter ?? this.filter;
  }

  /** Stops in a waiting phase with the reason and the commands that resolve it. */
  stopFor(phase: ConsumerPhase, reason: string, nowIso: string): void {
    this.phase = phase;
    this.stop = waitingStop(phase, reason, this.resolution(phase), nowIso);
  }

  /** Leaves a waiting phase (or backoff) for the session the start directive names. */
  proceed(): void {
    this.stop = null;
    this.phase = this.runningPhase();
  }

  /** Leaves backoff, if still in it, for the session the start directive names. */
  endBackoff(): void {
    if (this.phase === 'backoff') this.phase = this.runningPhase();
  }

  /** The decisions that end a waiting phase, from a shell and from the UI; null in the other phases. */
  private resolution(phase: ConsumerStop['phase']): Resolution | null {
    return stopResolution(this.consumerId, phase, ['from_floor', 'live_cut', 'abandon']);
  }

  carried(): ConsumerCarriedState {
    return {
      committed: this.committed,
      phase: this.phase,
      pendingRebind: this.pendingRebind,
      stop: this.stop,
      lastError: this.lastError,
      lastErrorAt: this.lastErrorAt,
      counters: this.counters,
      runs: this.runs,
      start: this.start,
      backoffRounds: this.backoffRounds,
      awaitDatabase: this.awaitDatabase,
      faultsWithoutProgress: this.faultsWithoutProgress,
      progressBase: this.progressBase,
      progress: this.progress,
      progressSamples: this.rate.samples(),
      countersAt: this.countersAt,
      live: this.live,
      endedEpoch: this.endedEpoch,
      database: this.database,
      alerts: this.alerts,
    };
  }

  status(): ConsumerStatus {
    return { ...this.carried(), consumerId: this.consumerId, subscriptionId: this.subscriptionId, filter: this.filter };
  }

  /**
   * Markdown for the Temporal UI's Current Details. What to do comes first (why the consumer waits and the exact
   * commands, wrapped to the panel's width), then where it is, every figure labelled with when it was taken: the
   * panel is rewritten at each progress signal (at most every 20 s while streaming) and at each phase change. The
   * last commit, the version and the totals refresh with the progress signal as position and head do.
   */
  details(nowMs: number): string {
    const lines = [`## Consumer \`${this.consumerId}\`: ${this.phase}`];
    if (this.stop !== null) lines.push(...waitingDetails(this.stop, this.resolution(this.stop.phase)?.ui ?? null));
    if (this.lastError !== null) {
      lines.push(
        '',
        `Last error (${this.lastErrorAt === null ? 'time unknown' : formatTime(this.lastErrorAt)}): ${this.lastError}`,
      );
    }
    const f = progressFigures(this.progress, this.rateAt(nowMs));
    const c = this.totals();
    const version = c.version ?? this.committed?.version ?? null;
    const totalsAt = this.live?.at ?? this.countersAt;
    const rebind = this.pendingRebind ? ` (rebind requested by ${this.pendingRebind.requestedBy})` : '';
    // One line per row: the panel's height is fixed, and what does not fit is cut off at its bottom.
    lines.push(
      '',
      '| | |',
      '| --- | --- |',
      `| position | ${f.position}, head ${f.head}, lag ${f.lag} (${f.asOf}) |`,
      `| rate | ${f.rate} over the last minute (as of ${formatTime(new Date(nowMs).toISOString())}) |`,
      `| last commit | ${c.lastCommitAt === null ? 'none yet' : formatTime(c.lastCommitAt)}, version ${formatCount(version)}; generation ${this.committed?.generation ?? 'none'}${rebind}, next start ${this.start.mode} |`,
      `| totals | ${formatCount(c.checkpointsCommitted)} checkpoints, ${formatCount(c.eventsApplied)} events, ${formatCount(c.duplicates)} duplicates; ${formatCount(this.runs)} runs, ${formatCount(c.sessions)} sessions, ${formatCount(c.acksSent)} ACKs (${totalsAt === null ? 'no run reported yet' : `as of ${formatTime(totalsAt)}`}) |`,
      `| alerts | ${this.alerts === null ? 'not reported yet (the streaming run reports them)' : `${formatAlerts(this.alerts)} (as of ${formatTime(this.alerts.at)})`} |`,
    );
    // The Temporal UI (2.42) sizes the panel about 26 px short of its content: let that be an empty line.
    lines.push('', '&nbsp;');
    return lines.join('\n');
  }
}
