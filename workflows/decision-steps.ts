// The steps both workflows of a consumer (the stream consumer and the backfill) take the same way: run the
// activity in a scope a pause can cancel, stop for a pause, back off on a durable timer that a pause (or a rebind)
// ends early, take the operator's quarantine decision, and record a decision while answering its update.
// ConsumerSteps and BackfillSteps extend it with their own runs and decisions.
import { ActivityFailure, CancellationScope, condition, log, proxyActivities } from '@temporalio/workflow';
import type { Activities } from '../activities/index.js';
import { FailureType } from '../activities/types-failures.js';
import { growingDelay } from '../protocol/backoff.js';
import type { HeldQuarantineItem } from '../domain/outcomes.js';
import type { DecisionInbox } from './consumer-inbox.js';
import type { ConsumerTuning } from './definitions.js';

/** What the shared steps read and write of a workflow's state. */
export interface StepState {
  readonly consumerId: string;
  readonly phase: string;
  /** Backoffs in a row: the durable timer grows with them. */
  backoffRounds: number;
  noteError(message: string): void;
  clearError(): void;
  stopFor(phase: 'paused' | 'awaiting_quarantine_decision', reason: string, nowIso: string): void;
  /** Leaves a waiting phase for the next run. */
  proceed(): void;
  /** Leaves backoff, if still in it, for the next run. */
  endBackoff(): void;
}

export interface StepsContext<State extends StepState, Inbox extends DecisionInbox<string, unknown>> {
  state: State;
  inbox: Inbox;
  tuning: Required<ConsumerTuning>;
  /** Shows the state in search attributes and Current Details. */
  publish: () => void;
}

export abstract class DecisionSteps<State extends StepState, Inbox extends DecisionInbox<string, unknown>> {
  readonly state: State;
  /** Shows the state in search attributes and Current Details. */
  readonly publish: () => void;
  protected readonly inbox: Inbox;
  protected readonly tuning: Required<ConsumerTuning>;
  protected readonly decisions: Activities = decisionActivities();
  /** The running activity's scope: a pause (or a rebind) cancels it, and it stops at its next boundary. */
  private activityScope: CancellationScope | null = null;

  protected constructor(context: StepsContext<State, Inbox>) {
    this.state = context.state;
    this.inbox = context.inbox;
    this.tuning = context.tuning;
    this.publish = context.publish;
  }

  /**
   * Runs the phase's step; true when it ran an activity (those count toward continue-as-new). The phases both
   * workflows have are taken here, the others by the workflow's own steps.
   */
  async step(phase: State['phase']): Promise<boolean> {
    switch (phase) {
      case 'backoff':
        await this.backoff();
        return false;
      case 'paused':
        await this.waitForResume();
        return false;
      case 'awaiting_gap_decision':
        await this.decideGap();
        return false;
      case 'awaiting_quarantine_decision':
        await this.decideQuarantine();
        return false;
      default:
        return this.ownStep(phase);
    }
  }

  /** The step of a phase only this workflow has. */
  protected abstract ownStep(phase: State['phase']): Promise<boolean>;
  abstract backoff(): Promise<void>;
  abstract waitForResume(): Promise<void>;
  abstract decideGap(): Promise<void>;

  pauseRequested(): boolean {
    return this.inbox.pause !== null;
  }

  /** Stops the running activity, if any, at its next boundary (a checkpoint, a page chunk). */
  interruptRun(): void {
    this.activityScope?.cancel();
  }

  /** Stops for the requested pause (the loop checks that one is). */
  stopForPause(): void {
    const pause = this.inbox.pause!;
    this.state.stopFor('paused', `paused by ${pause.actor}: ${pause.reason}`, nowIso());
    log.info('consumer paused', { consumerId: this.state.consumerId, actor: pause.actor, reason: pause.reason });
  }

  /** Stops until the operator decides the held quarantine that blocks the checkpoint (or the page). */
  protected stopForHeldQuarantine(blocked: 'checkpoint' | 'page', items: readonly HeldQuarantineItem[]): void {
    const held = items.map(
      (item) => `${item.eventId} (${item.reason}, ${item.kind} ${item.entityId} at ${item.position})`,
    );
    this.state.stopFor(
      'awaiting_quarantine_decision',
      `held quarantine blocks the ${blocked}: ${held.join(', ')}`,
      nowIso(),
    );
  }

  /** The delay of the next backoff; each one in a row doubles it, up to the tuning's maximum. */
  nextBackoffDelay(): number {
    const bounds = { initialMs: this.tuning.backoffInitialMs, maxMs: this.tuning.backoffMaxMs };
    const delay = growingDelay(bounds, this.state.backoffRounds);
    this.state.backoffRounds += 1;
    return delay;
  }

  async decideQuarantine(): Promise<void> {
    await condition(() => this.inbox.quarantine !== null);
    const { ticket, value } = this.inbox.takeQuarantine()!;
    const consumerId = this.state.consumerId;
    if (!(await this.record(ticket, () => this.decisions.resolveQuarantine({ consumerId, ...value })))) return;
    // The blocked checkpoint (or page) is delivered again; the decision now lets it commit (or retries it).
    this.state.proceed();
  }

  /** Runs the activity in a scope interruptRun cancels. */
  protected async interruptible<T>(run: () => Promise<T>): Promise<T> {
    const scope = new CancellationScope();
    this.activityScope = scope;
    try {
      return await scope.run(run);
    } finally {
      this.activityScope = null;
    }
  }

  /** Waits out the next backoff delay (at least `atLeastMs`), then leaves backoff; a pause ends the wait early. */
  protected async backOff(atLeastMs = 0): Promise<void> {
    const delay = Math.max(this.nextBackoffDelay(), atLeastMs);
    this.publish();
    await this.untilWoken(delay);
    this.state.endBackoff();
  }

  /** A durable timer that a pause or a rebind ends early; neither drops what was committed. */
  protected async untilWoken(delayMs: number): Promise<void> {
    const before = this.inbox.wakeups;
    await condition(() => this.inbox.wakeups !== before, delayMs);
  }

  /** Runs the recording activity; answers the waiting update either way. Null: stay in the waiting phase. */
  protected async record<T>(ticket: number, write: () => Promise<T>): Promise<T | null> {
    let result: T;
    try {
      result = await write();
    } catch (error) {
      const message = `decision not recorded: ${errorMessage(error)}`;
      this.state.noteError(message);
      this.inbox.settle(ticket, message);
      return null;
    }
    this.state.clearError();
    this.inbox.settle(ticket, null);
    return result;
  }
}

/** The short database steps: loading the checkpoint and recording decisions. */
function decisionActivities(): Activities {
  return proxyActivities<Activities>({
    startToCloseTimeout: 30_000,
    retry: {
      initialInterval: 1_000,
      maximumInterval: 15_000,
      maximumAttempts: 8,
      nonRetryableErrorTypes: [FailureType.InvalidDecision],
    },
  });
}

/** Workflow time (deterministic), as the states' timestamps show it. */
export function nowIso(): string {
  return new Date(Date.now()).toISOString();
}

export function errorMessage(error: unknown): string {
  const cause = error instanceof ActivityFailure && error.cause ? error.cause : error;
  return cause instanceof Error ? cause.message : String(cause);
}
