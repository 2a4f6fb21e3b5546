// The consumer workflow's long-lived state as a plain class: what the workflow drives, what survives
// continue-as-new, what the status query answers and what Current Details shows. Pure (no Temporal
// APIs), so it is unit-tested directly; the workflow supplies the clock (workflow time).
import type { CommittedView } from '../activities/index.js';
import type { ConsumeOutcome, CheckpointSummary, StartDirective, StreamCounters } from '../activities/types.js';
import { emptyCounters } from '../activities/types.js';
import type { StreamFilter } from '../protocol/codec.js';
import { headAndLagAt } from '../protocol/progress.js';
import { movedForward } from './run-failure.js';
import { resolveBindingCommand, resolveGapCommand, resolveQuarantineCommand, resumeCommand } from './commands.js';
import type {
  ConsumerCarriedState,
  ConsumerPhase,
  ConsumerStatus,
  ConsumerStop,
  ConsumerWorkflowInput,
} from './definitions.js';

/** Phases in which the workflow runs the streaming activity (or waits to run it again). */
export const RUNNING_PHASES: readonly ConsumerPhase[] = ['streaming', 'rebinding', 'backoff'];

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
  counters: StreamCounters;
  /** Streaming activity runs over the consumer's whole life (all executions). */
  runs: number;
  backoffRounds: number;
  faultsWithoutProgress: number;
  progressBase: number | null;

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
    this.faultsWithoutProgress = carried?.faultsWithoutProgress ?? 0;
    this.progressBase = carried?.progressBase ?? null;
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
   * A run that lost its worker returns no outcome; its last heartbeat says what it did up to then, so the totals
   * keep counting it rather than drop the crashed run's work.
   */
  addCrashedRunCounters(heartbeatCounters: StreamCounters): void {
    this.addCounters(heartbeatCounters);
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
  adopt(outcome: ConsumeOutcome): void {
    this.committed = outcome.committed;
    this.runs += 1;
    this.backoffRounds = 0;
    this.addCounters(outcome.counters);
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
    this.stop = { phase, reason, resolveWith: this.resolveWith(phase), since: nowIso };
  }

  /** Leaves a waiting phase (or backoff) for the session the start directive names. */
  proceed(): void {
    this.stop = null;
    this.phase = this.runningPhase();
  }

  private resolveWith(phase: ConsumerPhase): string {
    const id = this.consumerId;
    switch (phase) {
      case 'awaiting_gap_decision':
        return [
          resolveGapCommand(id, 'from_floor'),
          resolveGapCommand(id, 'live_cut'),
          resolveGapCommand(id, 'abandon'),
        ].join('\n');
      case 'awaiting_binding_decision':
        return [
          resolveBindingCommand(id, 'retry'),
          resolveBindingCommand(id, 'from_floor'),
          resolveBindingCommand(id, 'live_cut'),
          resolveBindingCommand(id, 'abandon'),
        ].join('\n');
      case 'awaiting_quarantine_decision':
        return [resolveQuarantineCommand(id, 'release_terminal'), resolveQuarantineCommand(id, 'retry')].join('\n');
      case 'paused':
        return resumeCommand(id);
      default:
        return '';
    }
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
      faultsWithoutProgress: this.faultsWithoutProgress,
      progressBase: this.progressBase,
    };
  }

  status(): ConsumerStatus {
    return { ...this.carried(), consumerId: this.consumerId, subscriptionId: this.subscriptionId, filter: this.filter };
  }

  /** Markdown for the Temporal UI's Current Details: where the consumer is and, when stopped, what to run. */
  details(nowMs: number): string {
    const position = this.committed?.position ?? null;
    const { head, lag } = headAndLagAt(position, this.counters.lastHeadPosition);
    const lastCommitMs = this.counters.lastCommitAt === null ? NaN : Date.parse(this.counters.lastCommitAt);
    const tokenAge = Number.isNaN(lastCommitMs)
      ? 'no commit yet'
      : `${formatDuration(nowMs - lastCommitMs)} (last commit ${this.counters.lastCommitAt})`;
    const lines = [
      `## Consumer \`${this.consumerId}\`: ${this.phase}`,
      '',
      '| | |',
      '| --- | --- |',
      `| position | ${position ?? 'none committed'}${this.committed ? ` (version ${this.committed.version})` : ''} |`,
      `| head / lag | ${head ?? 'unknown'} / ${lag ?? 'unknown'} |`,
      `| token age | ${tokenAge} |`,
      `| generation | ${this.committed?.generation ?? 'none'}${this.pendingRebind ? ` (rebind requested by ${this.pendingRebind.requestedBy})` : ''} |`,
      `| next start | ${this.start.mode} |`,
      `| runs | ${this.runs} (sessions ${this.counters.sessions}, checkpoints ${this.counters.checkpointsCommitted}, events ${this.counters.eventsApplied}, duplicates ${this.counters.duplicates}, ACKs ${this.counters.acksSent}) |`,
    ];
    if (this.lastError !== null)
      lines.push('', `Last error (${this.lastErrorAt ?? 'time unknown'}): ${this.lastError}`);
    if (this.stop !== null) {
      lines.push('', `**Stopped since ${this.stop.since}:** ${this.stop.reason}`);
      if (this.stop.resolveWith !== '')
        lines.push('', 'Resolve with one of:', '', '```sh', this.stop.resolveWith, '```');
    }
    return lines.join('\n');
  }
}

export function formatDuration(ms: number): string {
  const seconds = Math.max(0, Math.round(ms / 1000));
  if (seconds < 120) return `${seconds} s`;
  const minutes = Math.round(seconds / 60);
  if (minutes < 120) return `${minutes} min`;
  return `${Math.round(minutes / 60)} h`;
}
