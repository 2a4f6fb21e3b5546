// The backfill workflow's state as a plain class: what the workflow drives, what survives continue-as-new, what
// the status query answers and what Current Details shows. Pure (no Temporal APIs); the workflow supplies the clock.
import type { PageOutcome } from '../activities/page-consumer.js';
import { formatTime } from '../protocol/progress.js';
import { resolveGapCommand, resolveQuarantineCommand, resumeCommand, wrapShellCommand } from './commands.js';
import type {
  BackfillCarriedState,
  BackfillCounters,
  BackfillPhase,
  BackfillStatus,
  BackfillWorkflowInput,
  ConsumerStop,
} from './definitions.js';
import type { StreamFilter } from '../protocol/codec.js';

/** Phases in which the workflow runs the page activity (or waits to run it again). */
export const BACKFILL_RUNNING_PHASES: readonly BackfillPhase[] = ['backfilling', 'backoff'];

export function emptyBackfillCounters(): BackfillCounters {
  return { requests: 0, pages: 0, chunks: 0, applied: 0, recognised: 0, duplicates: 0, noEffect: 0, quarantined: 0 };
}

export class BackfillState {
  readonly consumerId: string;
  readonly filter: StreamFilter;
  readonly stream: string | null;
  readonly thenStream: BackfillWorkflowInput['thenStream'] | null;
  phase: BackfillPhase;
  progress: BackfillCarriedState['progress'];
  counters: BackfillCounters;
  runs: number;
  stop: ConsumerStop | null;
  lastError: string | null;
  backoffRounds: number;
  ending: string | null;

  noteError(message: string): void {
    this.lastError = message;
  }

  constructor(input: BackfillWorkflowInput) {
    const carried = input.carried;
    this.consumerId = input.consumerId;
    this.filter = input.filter;
    this.stream = input.stream ?? null;
    this.thenStream = input.thenStream ?? null;
    this.phase = carried?.phase ?? 'backfilling';
    this.progress = carried?.progress ?? null;
    this.counters = carried?.counters ?? emptyBackfillCounters();
    this.runs = carried?.runs ?? 0;
    this.stop = carried?.stop ?? null;
    this.lastError = carried?.lastError ?? null;
    this.backoffRounds = carried?.backoffRounds ?? 0;
    this.ending = carried?.ending ?? null;
  }

  /** Takes a run's outcome: its saved progress is the database's word and replaces the copy. */
  adopt(outcome: PageOutcome): void {
    this.progress = outcome.progress;
    this.runs += 1;
    const sum = this.counters;
    const run = outcome.counters;
    for (const key of Object.keys(sum) as (keyof BackfillCounters)[]) sum[key] += run[key];
  }

  /** Stops in a waiting phase (or completes) with the reason and the commands that resolve it. */
  stopFor(phase: BackfillPhase, reason: string, nowIso: string): void {
    this.phase = phase;
    this.stop = { phase, reason, resolveWith: this.resolveWith(phase), since: nowIso };
  }

  /** Leaves a waiting phase (or backoff) for the next page run. */
  proceed(): void {
    this.stop = null;
    this.phase = 'backfilling';
  }

  complete(ending: string): void {
    this.stop = null;
    this.ending = ending;
    this.phase = 'completed';
  }

  private resolveWith(phase: BackfillPhase): string {
    const id = this.consumerId;
    switch (phase) {
      case 'awaiting_gap_decision':
        return [resolveGapCommand(id, 'from_floor'), resolveGapCommand(id, 'abandon')].join('\n');
      case 'awaiting_quarantine_decision':
        return [resolveQuarantineCommand(id, 'release_terminal'), resolveQuarantineCommand(id, 'retry')].join('\n');
      case 'paused':
        return resumeCommand(id);
      default:
        return '';
    }
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
    };
  }

  /**
   * Markdown for the Temporal UI's Current Details: when stopped, why and what to run first (wrapped to the panel's
   * width); then how far the backfill is, as of its last run.
   */
  details(lastRunAt: string | null): string {
    const p = this.progress;
    const c = this.counters;
    const lines = [`## Backfill \`${this.consumerId}\`: ${this.phase}`];
    if (this.stop !== null) {
      lines.push('', `**Waiting since ${formatTime(this.stop.since)}:** ${this.stop.reason}`);
      if (this.stop.resolveWith !== '') {
        const commands = this.stop.resolveWith.split('\n').map((command) => wrapShellCommand(command));
        lines.push('', '```sh', commands.join('\n'), '```');
      }
    }
    if (this.ending !== null) lines.push('', `Ended: ${this.ending}`);
    if (this.lastError !== null) lines.push('', `Last error: ${this.lastError}`);
    lines.push(
      '',
      '| | |',
      '| --- | --- |',
      `| applied position | ${p ? `${p.appliedPosition} (version ${p.version})` : 'no run finished yet'} |`,
      `| resume cursor | ${p?.resumeCursor ? 'saved' : 'none: the next page is at the retention floor'} |`,
      `| last run ended | ${lastRunAt === null ? 'no run finished yet' : formatTime(lastRunAt)} |`,
      `| runs | ${this.runs} (requests ${c.requests}, pages ${c.pages}, chunks ${c.chunks}) |`,
      `| events | new ${c.applied}, recognised ${c.recognised}, duplicates ${c.duplicates}, no effect ${c.noEffect}, quarantined ${c.quarantined} |`,
      `| then | ${this.thenStream ? `live stream consumer (subscription ${this.thenStream.subscriptionId})` : 'stop at the head'} |`,
    );
    // The Temporal UI (2.42) sizes the panel about 26 px short of its content: let that be an empty line.
    lines.push('', '&nbsp;');
    return lines.join('\n');
  }
}
