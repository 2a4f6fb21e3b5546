// The backfill workflow's state as a plain class: what the workflow drives, what survives continue-as-new, what
// the status query answers and what Current Details shows. Pure (no Temporal APIs); the workflow supplies the clock.
import type { PageOutcome, PageTarget } from '../activities/page-consumer.js';
import { emptyPageCounters, type PageCounters } from '../activities/types.js';
import { growingDelay } from '../protocol/backoff.js';
import { formatCount, formatTime } from '../protocol/progress.js';
import { stopResolution, waitingDetails, waitingStop, type Resolution } from './commands.js';
import type {
  BackfillCarriedState,
  BackfillPhase,
  BackfillStatus,
  BackfillTarget,
  BackfillWorkflowInput,
  ConsumerStop,
} from './definitions.js';
import type { StreamFilter } from '../protocol/codec.js';

/** Phases in which the workflow runs the page activity (or waits to run it again). */
export const BACKFILL_RUNNING_PHASES: readonly BackfillPhase[] = ['backfilling', 'backoff', 'at_head'];

/** The timer of the next wait at the head: doubles per wait in a row, up to the backoff maximum. */
export function headWaitMs(headWaits: number, tuning: { backoffInitialMs: number; backoffMaxMs: number }): number {
  return growingDelay({ initialMs: tuning.backoffInitialMs, maxMs: tuning.backoffMaxMs }, Math.min(headWaits, 30));
}

/**
 * How far a backfill is, in one phrase: "applied 1,746 of 1,750" once its target is fixed, "applied 1,746, head
 * 1,790 (tailing)" without one.
 */
export function appliedText(
  status: Pick<BackfillStatus, 'progress' | 'tail'> & Pick<BackfillCarriedState, 'target' | 'sourceHead'>,
): string {
  const applied = status.progress ? formatCount(status.progress.appliedPosition) : 'nothing yet';
  const head = status.sourceHead ?? null;
  if (status.tail) return `applied ${applied}${head === null ? '' : `, head ${formatCount(head)}`} (tailing)`;
  const target = status.target ?? null;
  if (target === null) return `applied ${applied} (target: the source's head at the first page)`;
  return `applied ${applied} of ${formatCount(target.position)}`;
}

/** Where the target came from, for status and Current Details. */
export function targetText(status: Pick<BackfillStatus, 'tail'> & Pick<BackfillCarriedState, 'target'>): string {
  if (status.tail) return 'none: tailing, it keeps paging as the history grows';
  const target = status.target ?? null;
  if (target === null) return "not fixed yet: the source's head at the first page";
  const origin =
    target.source === 'until'
      ? 'given with --until'
      : `the source's head at the first page${target.fixedAt === null ? '' : `, ${formatTime(target.fixedAt)}`}`;
  return `${formatCount(target.position)} (${origin}${target.historyId === null ? '' : `; history ${target.historyId}`})`;
}

export class BackfillState {
  readonly consumerId: string;
  readonly filter: StreamFilter;
  readonly stream: string | null;
  readonly thenStream: BackfillWorkflowInput['thenStream'] | null;
  phase: BackfillPhase;
  progress: BackfillCarriedState['progress'];
  counters: PageCounters;
  runs: number;
  stop: ConsumerStop | null;
  lastError: string | null;
  backoffRounds: number;
  ending: string | null;
  readonly until: number | null;
  readonly tail: boolean;
  target: BackfillTarget | null;
  sourceHead: number | null;
  headWaits: number;
  waiting: { reason: string; until: string } | null;
  handover: NonNullable<BackfillCarriedState['handover']> | null;

  noteError(message: string): void {
    this.lastError = message;
  }

  clearError(): void {
    this.lastError = null;
  }

  constructor(input: BackfillWorkflowInput) {
    const carried = input.carried;
    this.consumerId = input.consumerId;
    this.filter = input.filter;
    this.stream = input.stream ?? null;
    this.thenStream = input.thenStream ?? null;
    this.phase = carried?.phase ?? 'backfilling';
    this.progress = carried?.progress ?? null;
    this.counters = carried?.counters ?? emptyPageCounters();
    this.runs = carried?.runs ?? 0;
    this.stop = carried?.stop ?? null;
    this.lastError = carried?.lastError ?? null;
    this.backoffRounds = carried?.backoffRounds ?? 0;
    this.ending = carried?.ending ?? null;
    this.tail = input.tail === true;
    this.until = input.until ?? null;
    const given: BackfillTarget | null =
      this.until !== null && !this.tail
        ? { position: this.until, historyId: null, source: 'until', fixedAt: null }
        : null;
    this.target = carried?.target !== undefined ? carried.target : given;
    this.sourceHead = carried?.sourceHead ?? null;
    this.headWaits = carried?.headWaits ?? 0;
    this.waiting = carried?.waiting ?? null;
    this.handover = carried?.handover ?? null;
  }

  /**
   * What the next page run works to: the fixed target; `head` while none is fixed (the run fixes it at its first
   * page); a tailing backfill's every run works to the head its first page answers with.
   */
  runTarget(): PageTarget {
    if (this.tail || this.target === null) return 'head';
    return { position: this.target.position, historyId: this.target.historyId };
  }

  /**
   * Takes a run's outcome: its saved progress is the database's word and replaces the copy. The first run of a
   * backfill fixes its target (the head its first page saw); an --until target is bound to the history it ran on.
   */
  adopt(outcome: PageOutcome, nowIso: string | null = null): void {
    this.progress = outcome.progress;
    this.runs += 1;
    const sum = this.counters;
    const run = outcome.counters;
    for (const key of Object.keys(sum) as (keyof PageCounters)[]) sum[key] += run[key];
    if (outcome.sourceHistory) this.sourceHead = outcome.sourceHistory.head;
    const fixed = outcome.target ?? null;
    if (this.tail || fixed === null) return;
    if (this.target === null) {
      this.target = { position: fixed.position, historyId: fixed.historyId, source: 'head', fixedAt: nowIso };
    } else if (this.target.historyId === null && this.target.position === fixed.position) {
      this.target = { ...this.target, historyId: fixed.historyId };
    }
  }

  /**
   * After a run that reached its target (or, in an older execution's history, the head without one): hand over or
   * complete; tailing, or with the source's head still below the target: wait at the head.
   */
  afterReachingHead(outcome: PageOutcome): 'hand_over' | 'completed' | 'at_head' {
    const reached = outcome.kind === 'target_reached' || (outcome.kind === 'caught_up' && outcome.target == null);
    if (reached && !this.tail) {
      if (this.thenStream) {
        this.phase = 'handing_over';
        return 'hand_over';
      }
      const at = `applied position ${formatCount(outcome.progress.appliedPosition)}`;
      const target = this.target;
      this.complete(
        target === null
          ? `caught up at the head, ${at}`
          : `reached its target ${formatCount(target.position)} (${target.source === 'until' ? 'given with --until' : "the source's head when it started"}), ${at}`,
      );
      return 'completed';
    }
    // Tailing at the head, or the source's head still below the target: wait, longer while little comes.
    if (outcome.counters.pages > 1) this.headWaits = 0;
    this.phase = 'at_head';
    return 'at_head';
  }

  /** Why the backfill waits at the head, for the status, Current Details and the log. */
  atHeadReason(delayMs: number): string {
    const head = formatCount(this.sourceHead);
    const applied = formatCount(this.progress?.appliedPosition ?? 0);
    const next = `the next page in ${Math.round(delayMs / 100) / 10} s`;
    if (this.tail || this.target === null) return `tailing: at the source's head ${head} (applied ${applied}); ${next}`;
    return `the source's head ${head} is below the target ${formatCount(this.target.position)} (applied ${applied}); ${next}`;
  }

  /**
   * A from_floor decision starts the backfill over at the retention floor (after a rebuilt history the old
   * positions mean nothing): a head target is fixed again at the next first page, an --until target is kept and
   * bound to the history the source serves then.
   */
  restartFromFloor(): void {
    const target = this.target;
    this.target = target?.source === 'until' ? { ...target, historyId: null } : null;
    this.headWaits = 0;
  }

  /** Stops in a waiting phase (or completes) with the reason and the commands that resolve it. */
  stopFor(phase: BackfillPhase, reason: string, nowIso: string): void {
    this.phase = phase;
    this.stop = waitingStop(phase, reason, this.resolution(phase), nowIso);
  }

  /** Leaves a waiting phase (or backoff) for the next page run. */
  proceed(): void {
    this.stop = null;
    this.phase = 'backfilling';
  }

  /** Leaves backoff, if still in it, for the next page run. */
  endBackoff(): void {
    if (this.phase === 'backoff') this.phase = 'backfilling';
  }

  complete(ending: string): void {
    this.stop = null;
    this.ending = ending;
    this.phase = 'completed';
  }

  /** The decisions that end a waiting phase, from a shell and from the UI (a backfill has no live cut). */
  private resolution(phase: ConsumerStop['phase']): Resolution | null {
    return stopResolution(this.consumerId, phase, ['from_floor', 'abandon']);
  }

  carried(): BackfillCarriedState {
    return {
      phase: this.phase,
      progress: this.progress,
      counters: { ...this.counters },
      runs: this.runs,
      stop: this.stop,
      lastError: this.lastError,
      backoffRounds: this.backoffRounds,
      ending: this.ending,
      target: this.target,
      sourceHead: this.sourceHead,
      headWaits: this.headWaits,
      waiting: this.waiting,
      handover: this.handover,
    };
  }

  status(): BackfillStatus {
    return {
      ...this.carried(),
      kind: 'backfill',
      consumerId: this.consumerId,
      filter: this.filter,
      stream: this.stream,
      thenStream: this.thenStream,
      until: this.until,
      tail: this.tail,
    };
  }

  private thenText(): string {
    if (this.tail) return 'keep paging as the history grows (tailing)';
    if (this.handover) return `handed over to ${this.handover.workflowId} at ${formatTime(this.handover.at)}`;
    if (this.thenStream)
      return `at the target, hand over to the live stream consumer (subscription ${this.thenStream.subscriptionId})`;
    return 'complete at the target';
  }

  /**
   * Markdown for the Temporal UI's Current Details: when stopped, why and what to run first (wrapped to the panel's
   * width); then how far the backfill is, as of its last run.
   */
  details(lastRunAt: string | null): string {
    const p = this.progress;
    const c = this.counters;
    const lines = [`## Backfill \`${this.consumerId}\`: ${this.phase}`];
    if (this.stop !== null) lines.push(...waitingDetails(this.stop, this.resolution(this.stop.phase)?.ui ?? null));
    if (this.waiting !== null)
      lines.push('', `**At the head until ${formatTime(this.waiting.until)}:** ${this.waiting.reason}`);
    if (this.ending !== null) lines.push('', `Ended: ${this.ending}`);
    if (this.lastError !== null) lines.push('', `Last error: ${this.lastError}`);
    const status = { progress: p, tail: this.tail, target: this.target, sourceHead: this.sourceHead };
    lines.push(
      '',
      '| | |',
      '| --- | --- |',
      `| progress | ${appliedText(status)} |`,
      `| target | ${targetText(status)} |`,
      `| applied position | ${p ? `${p.appliedPosition} (version ${p.version})` : 'no run finished yet'} |`,
      `| source head | ${this.sourceHead === null ? 'not seen yet' : `${formatCount(this.sourceHead)} (as the last run saw it)`} |`,
      `| resume cursor | ${p?.resumeCursor ? 'saved' : 'none: the next page is at the retention floor'} |`,
      `| last run ended | ${lastRunAt === null ? 'no run finished yet' : formatTime(lastRunAt)} |`,
      `| runs | ${this.runs} (requests ${c.requests}, pages ${c.pages}, chunks ${c.chunks}) |`,
      `| events | new ${c.applied}, recognised ${c.recognised}, duplicates ${c.duplicates}, no effect ${c.noEffect}, quarantined ${c.quarantined} |`,
      `| then | ${this.thenText()} |`,
    );
    // The Temporal UI (2.42) sizes the panel about 26 px short of its content: let that be an empty line.
    lines.push('', '&nbsp;');
    return lines.join('\n');
  }
}
