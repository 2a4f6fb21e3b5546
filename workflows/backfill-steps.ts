// The backfill workflow's phase steps: run the page activity for a bounded number of pages and take its outcome,
// back off, wait for a resume, apply the operator's decisions, and hand the consumer id over to the live stream.
// The steps the stream consumer takes alike are DecisionSteps'. Each step moves BackfillState to the next phase; the
// loop (phase-loop.ts) runs the phase's step and publishes.
import {
  ActivityCancellationType,
  ActivityFailure,
  ApplicationFailure,
  condition,
  isCancellation,
  log,
  ParentClosePolicy,
  proxyActivities,
  startChild,
} from '@temporalio/workflow';
import { WorkflowExecutionAlreadyStartedError } from '@temporalio/common';
import type { Activities } from '../activities/index.js';
import type { PageOutcome } from '../activities/page-consumer.js';
import { FailureType, knownFailureType } from '../activities/types-failures.js';
import type { BackfillInbox } from './backfill-inbox.js';
import { headWaitMs, type BackfillState } from './backfill-state.js';
import { DecisionSteps, nowIso, type StepsContext } from './decision-steps.js';
import { needsOperator } from './run-failure.js';
import type { consumerWorkflow } from './consumer.js';
import {
  consumerIdSearchAttribute,
  consumerWorkflowId,
  kindSearchAttribute,
  phaseSearchAttribute,
  type BackfillPhase,
  type ConsumerTuning,
} from './definitions.js';

export interface BackfillStepContext extends StepsContext<BackfillState, BackfillInbox> {
  pagesPerRun: number;
}

export class BackfillSteps extends DecisionSteps<BackfillState, BackfillInbox> {
  private readonly pagesPerRun: number;
  private readonly pages: Activities;
  private readonly handover: Activities;
  /** Workflow time of the last finished run, for Current Details. */
  lastRunAt: string | null = null;

  constructor(context: BackfillStepContext) {
    super(context);
    this.pagesPerRun = context.pagesPerRun;
    this.pages = pageActivities(context.tuning);
    this.handover = handoverActivities(context.tuning);
  }

  /** The page run, the wait at the head and the handover: the phases only the backfill has. */
  protected async ownStep(phase: BackfillPhase): Promise<boolean> {
    if (phase === 'backfilling') {
      await this.runPages();
      return true;
    }
    if (phase === 'at_head') await this.waitAtHead();
    else if (phase === 'handing_over') await this.handOver();
    return false;
  }

  async runPages(): Promise<void> {
    const { state } = this;
    state.phase = 'backfilling';
    this.publish();
    let outcome: PageOutcome;
    try {
      outcome = await this.interruptible(() =>
        this.pages.consumePages({
          consumerId: state.consumerId,
          filter: state.filter,
          ...(state.stream ? { stream: state.stream } : {}),
          maxPages: this.pagesPerRun,
          target: state.runTarget(),
        }),
      );
    } catch (error) {
      this.handleRunFailure(error);
      return;
    }
    this.lastRunAt = nowIso();
    state.adopt(outcome, this.lastRunAt);
    state.lastError = null;
    state.backoffRounds = 0;
    this.handleOutcome(outcome);
  }

  private handleOutcome(outcome: PageOutcome): void {
    const { state } = this;
    const at = `applied position ${outcome.progress.appliedPosition}`;
    switch (outcome.kind) {
      case 'page_limit':
        // A full run: the history is far from the head, so the next wait there starts short again.
        state.headWaits = 0;
        return;
      case 'cancelled':
        // Loop: the next run goes on from the saved cursor; a pause requested meanwhile is taken at the loop's top.
        return;
      case 'target_reached':
      case 'caught_up': {
        // The target is reached: hand over or complete. Tailing, or with the source's head below the target (a
        // caught_up of a run with a target): wait at the head on a durable timer instead of paging one live
        // transition at a time.
        const next = state.afterReachingHead(outcome);
        if (next !== 'at_head')
          log.info('backfill reached its target', {
            consumerId: state.consumerId,
            target: state.target?.position ?? null,
            appliedPosition: outcome.progress.appliedPosition,
            by: outcome.kind === 'target_reached' ? outcome.by : 'caught_up',
            then: next,
          });
        return;
      }
      case 'non_advancing':
      case 'fenced':
        // Never spin: wait on a growing durable timer, then ask again from the saved cursor.
        state.lastError =
          outcome.kind === 'fenced'
            ? `fenced: another run moved this consumer's progress (version ${outcome.actualVersion ?? 'none'}); nothing written`
            : `non_advancing: the source repeated the request cursor with events ${outcome.attempts} times; nothing of that page applied`;
        state.phase = 'backoff';
        return;
      case 'reset':
        this.stopFor(
          'awaiting_gap_decision',
          `reset_required (${outcome.reason}): the source refused the saved cursor at ${at}; history ${outcome.history.id} ` +
            `retains ${outcome.history.floor}..${outcome.history.head}. The cursor is kept until a decision`,
        );
        return;
      case 'held_quarantine':
        this.stopForHeldQuarantine('page', outcome.items);
        return;
      case 'conflict':
        this.stopFor(
          'paused',
          `conflict: event ${outcome.eventId} arrived with content ${outcome.incomingHash}, its receipt has ${outcome.savedHash}. Fix the cause, then resume`,
        );
        return;
      case 'unrecognised_event':
        this.stopFor(
          'paused',
          `unrecognised_event: ${outcome.eventId} at ${outcome.position} is inside the applied prefix but has no receipt (the source's past changed). Fix the cause, then resume`,
        );
        return;
      case 'binding_mismatch':
        this.stopFor('paused', `binding_mismatch: ${outcome.message}`);
        return;
      case 'source_failed':
        this.stopFor('paused', `source_failed (${outcome.code}): ${outcome.message}. Fix the cause, then resume`);
        return;
    }
  }

  private handleRunFailure(error: unknown): void {
    if (isCancellation(error)) return;
    const { state } = this;
    const cause = error instanceof ActivityFailure ? error.cause : error;
    const message = cause instanceof Error ? cause.message : String(cause);
    const type = cause instanceof ApplicationFailure ? cause.type : null;
    if (needsOperator(knownFailureType(type))) {
      this.stopFor('paused', `${type}: ${message}. Fix the cause, then resume`);
      return;
    }
    // Retries exhausted (an unavailable source, storage, timeouts): a durable timer, the saved cursor kept.
    state.lastError = `${type ?? (cause instanceof Error ? cause.name : 'error')}: ${message}`;
    state.phase = 'backoff';
    log.warn('page run failed; backing off', { consumerId: state.consumerId, error: state.lastError });
  }

  async backoff(): Promise<void> {
    await this.backOff();
  }

  /** At the source's head (tailing, or below the target): a growing durable timer, then the next page run. */
  async waitAtHead(): Promise<void> {
    const { state } = this;
    const delay = headWaitMs(state.headWaits, this.tuning);
    state.headWaits += 1;
    state.waiting = { reason: state.atHeadReason(delay), until: new Date(Date.now() + delay).toISOString() };
    log.info('backfill at the head; waiting for the history to grow', {
      consumerId: state.consumerId,
      sourceHead: state.sourceHead,
      appliedPosition: state.progress?.appliedPosition ?? null,
      target: state.tail ? null : (state.target?.position ?? null),
      delayMs: delay,
    });
    this.publish();
    try {
      await this.untilWoken(delay);
    } finally {
      state.waiting = null;
    }
    if (state.phase === 'at_head') state.phase = 'backfilling';
  }

  async waitForResume(): Promise<void> {
    await condition(() => this.inbox.resume !== null);
    this.inbox.takeResume();
    if (this.state.phase === 'paused') this.state.proceed();
  }

  async decideGap(): Promise<void> {
    await condition(() => this.inbox.gap !== null);
    const { ticket, value } = this.inbox.takeGap()!;
    const consumerId = this.state.consumerId;
    const view = await this.record(ticket, () => this.decisions.recordPageGapDecision({ consumerId, ...value }));
    if (!view) return;
    this.state.progress = view;
    if (value.decision === 'abandon') this.state.complete(`abandoned by ${value.actor}: ${value.reason}`);
    else {
      this.state.restartFromFloor();
      this.state.proceed();
    }
  }

  /**
   * The consumer id becomes a stream consumer (atomically, in the database), then its workflow starts and outlives
   * this one. A retried step finds the handover done and the workflow started, and completes the same way.
   */
  async handOver(): Promise<void> {
    const { state } = this;
    const thenStream = state.thenStream!;
    const handover = await this.handover.handOverToStream({
      consumerId: state.consumerId,
      expectedVersion: state.progress?.version ?? 0,
    });
    if (handover.kind === 'fenced') {
      // Another run moved the progress after ours caught up: page again from the saved cursor, then hand over.
      state.lastError = `handover fenced: the page progress moved to version ${handover.actualVersion}`;
      state.phase = 'backfilling';
      return;
    }
    const workflowId = consumerWorkflowId(state.consumerId);
    try {
      await startChild<typeof consumerWorkflow>('consumerWorkflow', {
        workflowId,
        args: [
          {
            consumerId: state.consumerId,
            subscriptionId: thenStream.subscriptionId,
            filter: state.filter,
            initialStart: 'from_floor',
            ...(thenStream.leaseMs !== undefined ? { leaseMs: thenStream.leaseMs } : {}),
            tuning: this.tuning,
          },
        ],
        parentClosePolicy: ParentClosePolicy.ABANDON,
        typedSearchAttributes: [
          { key: consumerIdSearchAttribute, value: state.consumerId },
          { key: phaseSearchAttribute, value: 'streaming' },
          { key: kindSearchAttribute, value: 'stream' },
        ],
      });
    } catch (error) {
      if (!(error instanceof WorkflowExecutionAlreadyStartedError)) throw error;
    }
    const appliedPosition =
      handover.kind === 'handed_over' ? handover.appliedPosition : (state.progress?.appliedPosition ?? 0);
    const target = state.target?.position ?? null;
    state.handover = { workflowId, appliedPosition, target, at: nowIso() };
    log.info('backfill handed over to the live stream consumer', {
      consumerId: state.consumerId,
      workflowId,
      appliedPosition,
      target,
      handover: handover.kind,
    });
    const at = state.progress ? ` after applied position ${state.progress.appliedPosition}` : '';
    const of = target === null ? '' : ` (target ${target})`;
    state.complete(`handed over to ${workflowId}${at}${of} (it starts at the floor; receipts recognise the overlap)`);
  }

  private stopFor(phase: BackfillPhase, reason: string): void {
    this.state.stopFor(phase, reason, nowIso());
  }
}

/**
 * The handover: one short transaction, retried like a decision, but a worker killed inside it is noticed by the
 * heartbeat timeout (the worker's database bounds keep the transaction well below it), not after 30 s.
 */
function handoverActivities(tuning: Required<ConsumerTuning>): Activities {
  return proxyActivities<Activities>({
    startToCloseTimeout: 30_000,
    heartbeatTimeout: tuning.heartbeatTimeoutMs,
    retry: {
      initialInterval: 1_000,
      maximumInterval: 15_000,
      maximumAttempts: 8,
      nonRetryableErrorTypes: [FailureType.InvalidDecision],
    },
  });
}

/** Page-run failures that need an operator or another attempt's fencing, never a blind retry. */
const PAGE_RUN_NON_RETRYABLE_TYPES: FailureType[] = [
  FailureType.LeaseLost,
  FailureType.DatabaseBehind,
  FailureType.ConfigError,
];

/** The bounded page run: heartbeats its progress, cancelled cooperatively, retried a bounded number of times. */
function pageActivities(tuning: Required<ConsumerTuning>): Activities {
  return proxyActivities<Activities>({
    // A run of pagesPerRun pages; the heartbeat timeout, not this, notices a dead worker.
    startToCloseTimeout: 30 * 60_000,
    heartbeatTimeout: tuning.heartbeatTimeoutMs,
    cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    retry: {
      initialInterval: 1_000,
      backoffCoefficient: 2,
      maximumInterval: tuning.maxActivityRetryIntervalMs,
      maximumAttempts: tuning.maxActivityAttempts,
      nonRetryableErrorTypes: PAGE_RUN_NON_RETRYABLE_TYPES,
    },
  });
}
