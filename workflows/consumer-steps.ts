// The consumer workflow's phase steps: run a streaming lease and take its outcome, back off (or wait for a lost
// database), wait for a resume, and apply the operator's decisions; the steps the backfill takes alike are
// DecisionSteps'. Each step moves ConsumerState to the next phase; the loop (phase-loop.ts) runs the phase's step
// and publishes the state after each one.
import {
  ActivityCancellationType,
  CancellationScope,
  condition,
  isCancellation,
  log,
  patched,
  proxyActivities,
  workflowInfo,
} from '@temporalio/workflow';
import type { Activities, CommittedView } from '../activities/index.js';
import { FailureType } from '../activities/types-failures.js';
import type { ConsumeOutcome, DecisionAudit } from '../activities/types.js';
import type { ConsumerInbox } from './consumer-inbox.js';
import type { ConsumerState } from './consumer-state.js';
import { DecisionSteps, errorMessage, nowIso, type StepsContext } from './decision-steps.js';
import {
  DEFAULT_HEARTBEAT_TIMEOUT_MS,
  leaseTaskQueue,
  type ConsumerPhase,
  type ConsumerTuning,
} from './definitions.js';
import { classifyRunFailure, type RunFailure } from './run-failure.js';

export const DEFAULT_TUNING: Required<ConsumerTuning> = {
  heartbeatTimeoutMs: DEFAULT_HEARTBEAT_TIMEOUT_MS,
  maxFaultsWithoutProgress: 6,
  maxActivityAttempts: 5,
  maxActivityRetryIntervalMs: 30_000,
  backoffInitialMs: 1_000,
  backoffMaxMs: 60_000,
  maxRunsPerExecution: 500,
};

/**
 * Histories written before this change retried the streaming activity in Temporal and backed off on every failure;
 * they replay that way. New executions take over at once after a crash and escalate repeated faults to a stop.
 */
export const ESCALATION_PATCH = 'crash-takeover-and-fault-escalation';

/**
 * Histories written before this change ran every lease on the workflow's task queue and took a timed-out lease over
 * from the workflow; they replay that way. New executions run leases on the lease queue, and the server retries a
 * timed-out attempt there at once, with no workflow task on the takeover path.
 */
export const LEASE_QUEUE_PATCH = 'lease-queue-server-takeover';

/**
 * Histories written before this change waited out a lost database on the growing timer; they replay that way. New
 * executions ask the database every DATABASE_PROBE_EVERY_MS until it answers, and run again at once.
 */
export const DATABASE_PROBE_PATCH = 'wait-for-the-database';
/** How often the wait for a lost database asks it; the next run starts within about this of its return. */
export const DATABASE_PROBE_EVERY_MS = 1_000;
/** One wait activity asks for at most this long; the workflow then starts another (a few history events each). */
const DATABASE_PROBE_MAX_MS = 5 * 60_000;

export interface StepContext extends StepsContext<ConsumerState, ConsumerInbox> {
  leaseMs: number;
}

export class ConsumerSteps extends DecisionSteps<ConsumerState, ConsumerInbox> {
  private readonly leaseMs: number;
  private readonly streaming: Activities;
  private readonly leases: Activities;
  private readonly probes: Activities;
  /** The server's retry-after of the last fault: the next backoff waits at least this long. */
  private retryAfterMs = 0;

  constructor(context: StepContext) {
    super(context);
    this.leaseMs = context.leaseMs;
    this.streaming = streamingActivities(context.tuning, context.leaseMs);
    this.leases = leaseActivities(context.tuning, context.leaseMs, leaseTaskQueue(workflowInfo().taskQueue));
    this.probes = probeActivities(context.tuning);
  }

  /** Reads the committed checkpoint (the authority) and starts from it; an explicit first start only without one. */
  async adoptDatabaseState(why: string): Promise<void> {
    const view = await this.decisions.loadCommitted({ consumerId: this.state.consumerId });
    if (view.abandoned) {
      this.stopFor('completed', 'the consumer was abandoned by an earlier decision');
      return;
    }
    this.state.adoptCommitted(view);
    log.info('adopted the committed checkpoint', {
      consumerId: this.state.consumerId,
      why,
      position: view.summary.position,
      start: this.state.start.mode,
    });
  }

  /** False (and in backoff, with the error shown) when the database could not be read. */
  async tryAdoptDatabaseState(why: string): Promise<boolean> {
    const { state } = this;
    try {
      await this.adoptDatabaseState(why);
    } catch (error) {
      state.noteError(`could not read the committed checkpoint: ${errorMessage(error)}`);
      state.phase = 'backoff';
      this.publish();
      return false;
    }
    state.endBackoff();
    state.backoffRounds = 0;
    return true;
  }

  /** The lease (streaming, rebinding) and the binding decision: the phases only the stream consumer has. */
  protected async ownStep(phase: ConsumerPhase): Promise<boolean> {
    if (phase === 'streaming' || phase === 'rebinding') {
      await this.runLease();
      return true;
    }
    if (phase === 'awaiting_binding_decision') await this.decideBinding();
    return false;
  }

  async runLease(): Promise<void> {
    const { state } = this;
    if (state.pendingRebind && state.start.mode === 'resume') {
      state.start = { mode: 'rebind', filter: state.pendingRebind.filter };
    }
    state.phase = state.runningPhase();
    // Only this run's failure may send the next backoff to wait for the database.
    state.awaitDatabase = false;
    this.publish();
    const streaming = patched(LEASE_QUEUE_PATCH) ? this.leases : this.streaming;
    let outcome: ConsumeOutcome;
    try {
      outcome = await this.interruptible(() =>
        streaming.consumeStream({
          consumerId: state.consumerId,
          subscriptionId: state.subscriptionId,
          start: state.start,
          leaseMs: this.leaseMs,
          expected: state.committed,
        }),
      );
    } catch (error) {
      this.handleRunFailure(error);
      return;
    }
    state.adopt(outcome, Date.now());
    state.noteProgress();
    state.clearError();
    this.handleOutcome(outcome);
  }

  private handleOutcome(outcome: ConsumeOutcome): void {
    switch (outcome.kind) {
      case 'lease_expired':
      case 'cancelled':
        // Loop: the next lease resumes; a pause or a rebind requested meanwhile is taken at the loop's top.
        return;
      case 'rebound':
        this.state.rebound();
        return;
      case 'reset_required':
        this.stopFor(
          'awaiting_gap_decision',
          `reset_required (${outcome.reason}): the server refused the saved token at position ${outcome.committed.position ?? 'none'}; ` +
            `history ${outcome.history.id} retains ${outcome.history.floor}..${outcome.history.head}. The token is kept until a decision`,
        );
        return;
      case 'cursor_mismatch':
        this.stopFor('awaiting_binding_decision', `cursor_mismatch: ${outcome.message}`);
        return;
      case 'held_quarantine':
        this.stopForHeldQuarantine('checkpoint', outcome.items);
        return;
      case 'failed':
        this.stopFor('paused', `stream failed (${outcome.code}): ${outcome.message}. Fix the cause, then resume`);
        return;
    }
  }

  private handleRunFailure(error: unknown): void {
    const failure = classifyRunFailure(error);
    const { state } = this;
    // However it ended, the run's counters join the totals: its failure carries them, a crash its last heartbeat.
    state.endRun(
      failure.kind === 'fault' ? failure.run : failure.kind === 'crash' ? failure.lastRun : null,
      Date.now(),
    );
    if (failure.kind === 'cancelled') return; // cancelled before any outcome: nothing more to adopt
    if (failure.kind === 'stop') {
      this.stopFor(
        'paused',
        `${failure.type}: ${failure.message}. Fix the cause; resume adopts the database's checkpoint`,
      );
      return;
    }
    if (!patched(ESCALATION_PATCH)) {
      const type = failure.kind === 'crash' ? 'TimeoutFailure' : failure.type;
      state.noteError(`${type}: ${failure.kind === 'crash' ? failure.description : failure.message}`);
      state.phase = 'backoff';
      return;
    }
    if (failure.kind === 'crash') {
      // The worker died or vanished: not the stream's fault. The next run takes the lease over at once.
      state.noteError(`streaming run lost its worker (${failure.description}); the next run took over at once`);
      log.warn('streaming run timed out; taking over at once', { consumerId: state.consumerId });
      return;
    }
    this.handleFault(failure);
  }

  /**
   * A fault that is not a crash: counted while the committed position does not move forward, waited on with a
   * growing backoff, and past the bound a stop that names it (docs/protocol.md §6).
   */
  private handleFault(fault: Extract<RunFailure, { kind: 'fault' }>): void {
    const { state } = this;
    if (fault.committed) state.committed = fault.committed;
    state.noteProgress();
    state.noteError(`${fault.type}: ${fault.message}`);
    if (fault.type === FailureType.StorageFailure) {
      // A database outage is waited out, never escalated to a stop: the next run resumes from the committed
      // checkpoint once Postgres answers again. A lost database is asked until it answers (the run starts within a
      // second of its return, whatever the outage's length); any other storage failure backs off on the timer.
      state.phase = 'backoff';
      state.awaitDatabase = fault.connectionLost;
      log.warn(
        fault.connectionLost
          ? 'database lost by the streaming run; waiting until it answers'
          : 'database failed the streaming run; backing off',
        { consumerId: state.consumerId, error: state.lastError },
      );
      return;
    }
    const count = state.countFault();
    const at = `committed position ${state.committed?.position ?? 'none'}`;
    if (count >= this.tuning.maxFaultsWithoutProgress) {
      log.error('streaming runs keep failing without progress; stopping', {
        consumerId: state.consumerId,
        faults: count,
        error: state.lastError,
      });
      this.stopFor(
        'paused',
        `${count} streaming runs in a row failed without forward progress (${at}); last: ${state.lastError}. ` +
          'Fix the cause, then resume',
      );
      return;
    }
    state.backoffRounds = count - 1;
    this.retryAfterMs = fault.retryAfterMs ?? 0;
    state.phase = 'backoff';
    log.warn('streaming run failed; backing off', {
      consumerId: state.consumerId,
      faults: count,
      error: state.lastError,
    });
  }

  async backoff(): Promise<void> {
    if (this.state.awaitDatabase && patched(DATABASE_PROBE_PATCH)) {
      await this.awaitDatabase();
      return;
    }
    const retryAfterMs = this.retryAfterMs;
    this.retryAfterMs = 0;
    await this.backOff(retryAfterMs);
  }

  /**
   * Asks the database every DATABASE_PROBE_EVERY_MS (after at least the first backoff delay) until it answers; a
   * pause or a rebind ends the wait early. A wait that cannot run (no worker has the activity) falls back to the
   * timer.
   */
  private async awaitDatabase(): Promise<void> {
    const { state } = this;
    this.publish();
    const before = this.inbox.wakeups;
    const scope = new CancellationScope();
    let settled = false;
    const waiting = scope
      .run(() =>
        this.probes.waitForDatabase({
          minWaitMs: this.tuning.backoffInitialMs,
          maxWaitMs: DATABASE_PROBE_MAX_MS,
          pollMs: DATABASE_PROBE_EVERY_MS,
        }),
      )
      .finally(() => {
        settled = true;
      });
    await condition(() => settled || this.inbox.wakeups !== before);
    if (!settled) scope.cancel();
    let answered: boolean;
    try {
      answered = (await waiting).answered;
    } catch (error) {
      if (isCancellation(error)) return; // woken: the loop takes the pause or rebind, the wait resumes after it
      log.warn('could not wait for the database; backing off on the timer', { error: errorMessage(error) });
      await condition(() => this.inbox.wakeups !== before, this.nextBackoffDelay());
      answered = true;
    }
    if (!answered) return; // still away: ask again
    state.awaitDatabase = false;
    state.endBackoff();
  }

  async waitForResume(): Promise<void> {
    await condition(() => this.inbox.resume !== null);
    const request = this.inbox.takeResume()!;
    try {
      await this.adoptDatabaseState(`resumed by ${request.actor}: ${request.reason}`);
    } catch (error) {
      // Still paused: the operator resumes again once the database answers.
      this.state.noteError(`resume could not read the committed checkpoint: ${errorMessage(error)}`);
      return;
    }
    if (this.state.phase === 'paused') {
      this.state.proceed();
      // The operator fixed the cause: the faults before the resume no longer count.
      this.state.faultsWithoutProgress = 0;
      log.info('consumer resumed', { consumerId: this.state.consumerId, actor: request.actor, reason: request.reason });
    }
  }

  async decideGap(): Promise<void> {
    await condition(() => this.inbox.gap !== null);
    const { ticket, value } = this.inbox.takeGap()!;
    const consumerId = this.state.consumerId;
    const view = await this.record(ticket, () => this.decisions.recordGapDecision({ consumerId, ...value }));
    if (view) this.startAsDecided(view, value);
  }

  async decideBinding(): Promise<void> {
    await condition(() => this.inbox.binding !== null);
    const { ticket, value } = this.inbox.takeBinding()!;
    const consumerId = this.state.consumerId;
    const view = await this.record(ticket, () => this.decisions.recordBindingDecision({ consumerId, ...value }));
    if (view) this.startAsDecided(view, value);
  }

  /**
   * A recorded start decision: the view the recording returned says how the next session starts (an explicit
   * start the decision recorded; retry keeps what was recorded before), or that the consumer is abandoned.
   */
  private startAsDecided(view: CommittedView, audit: DecisionAudit): void {
    if (view.abandoned) {
      this.stopFor('completed', `abandoned by ${audit.actor}: ${audit.reason}`);
      return;
    }
    this.state.adoptCommitted(view);
    this.state.proceed();
  }

  private stopFor(phase: Parameters<ConsumerState['stopFor']>[0], reason: string): void {
    this.state.stopFor(phase, reason, nowIso());
  }
}

/**
 * The streaming lease as histories before LEASE_QUEUE_PATCH ran it: on the workflow's queue, one attempt per run.
 * The workflow decides what a failure means (run-failure.ts): a timed-out attempt is taken over at once, a fault is
 * counted and backed off durably.
 */
function streamingActivities(tuning: Required<ConsumerTuning>, leaseMs: number): Activities {
  return proxyActivities<Activities>({
    // A run returns at the first checkpoint boundary after its lease; leave room for that and for the close.
    startToCloseTimeout: leaseMs * 2 + 60_000,
    heartbeatTimeout: tuning.heartbeatTimeoutMs,
    // Pause and rebind cancel cooperatively: the run stops at a checkpoint boundary and reports its outcome.
    cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    retry: { maximumAttempts: 1 },
  });
}

/**
 * The streaming lease on the lease queue: an attempt that stops heartbeating (killed, frozen, cut off) is retried by
 * the server at once, on whichever worker polls the lease queue, and the new attempt fences the old one in the
 * database. The activity raises every failure of its own as non-retryable, so faults still reach the workflow
 * (counted and backed off there); only timeouts are retried here.
 */
function leaseActivities(tuning: Required<ConsumerTuning>, leaseMs: number, taskQueue: string): Activities {
  return proxyActivities<Activities>({
    taskQueue,
    startToCloseTimeout: leaseMs * 2 + 60_000,
    heartbeatTimeout: tuning.heartbeatTimeoutMs,
    cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    // No bound on attempts (none given): a crash is never counted or backed off (each retry follows its timeout at
    // once), and the retried attempt reports the takeover to the workflow itself (its first progress signal).
    retry: { initialInterval: 100, backoffCoefficient: 1 },
  });
}

/** The wait for a lost database: heartbeats, so a worker lost meanwhile is noticed; one attempt after a few. */
function probeActivities(tuning: Required<ConsumerTuning>): Activities {
  return proxyActivities<Activities>({
    startToCloseTimeout: DATABASE_PROBE_MAX_MS + 60_000,
    heartbeatTimeout: tuning.heartbeatTimeoutMs,
    retry: { initialInterval: 1_000, maximumAttempts: 3 },
  });
}
