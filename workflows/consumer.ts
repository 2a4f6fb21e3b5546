// The consumer workflow: one per consumer (id `whalehunt-consumer:<consumerId>`). It runs the streaming
// activity lease after lease, adopts each run's committed summary (the database is the authority), and
// stops in a named waiting phase whenever the protocol demands an operator decision. Nothing here jumps a
// gap, changes a binding or releases a quarantine by itself.
import {
  ActivityCancellationType,
  ActivityFailure,
  ApplicationFailure,
  CancellationScope,
  allHandlersFinished,
  condition,
  continueAsNew,
  getExternalWorkflowHandle,
  isCancellation,
  log,
  proxyActivities,
  setCurrentDetails,
  setHandler,
  sleep,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import type { createActivities } from '../activities/index.js';
import type { ConsumeOutcome, DecisionAudit } from '../activities/types.js';
import { ConsumerState, RUNNING_PHASES } from './consumer-state.js';
import {
  consumerIdSearchAttribute,
  DEFAULT_LEASE_MS,
  pauseSignal,
  phaseSearchAttribute,
  rebindRejectedSignal,
  rebindSignal,
  rebindUpdate,
  resolveBindingSignal,
  resolveBindingUpdate,
  resolveGapSignal,
  resolveGapUpdate,
  resolveQuarantineSignal,
  resolveQuarantineUpdate,
  resumeSignal,
  statusQuery,
} from './definitions.js';
import type {
  BindingResolution,
  ConsumerPhase,
  ConsumerStatus,
  ConsumerWorkflowInput,
  GapResolution,
  QuarantineResolution,
  RebindRequest,
} from './definitions.js';
import {
  InvalidOperatorInput,
  parseAudit,
  parseBindingResolution,
  parseGapResolution,
  parseQuarantineResolution,
  parseRebindRequest,
} from './validation.js';

type Activities = ReturnType<typeof createActivities>;

const DEFAULTS = {
  heartbeatTimeoutMs: 15_000,
  maxActivityAttempts: 5,
  maxActivityRetryIntervalMs: 30_000,
  backoffInitialMs: 30_000,
  backoffMaxMs: 10 * 60_000,
  maxRunsPerExecution: 500,
};

/** Activity failure types the workflow must not retry blindly (the activity marks them non-retryable too). */
export const NON_RETRYABLE_TYPES = ['LeaseLost', 'DatabaseBehind', 'ConfigError'];

/** A decision (or resume) waiting for the main loop, and the update handler waiting for its result. */
interface Pending<T> {
  ticket: number;
  value: T;
}

export async function consumerWorkflow(input: ConsumerWorkflowInput): Promise<ConsumerStatus> {
  const tuning = { ...DEFAULTS, ...input.tuning };
  const leaseMs = input.leaseMs ?? DEFAULT_LEASE_MS;
  const state = new ConsumerState(input);
  const id = state.consumerId;

  const streaming = proxyActivities<Activities>({
    // A run returns at the first checkpoint boundary after its lease; leave room for that and for the close.
    startToCloseTimeout: leaseMs * 2 + 60_000,
    heartbeatTimeout: tuning.heartbeatTimeoutMs,
    // Pause and rebind cancel cooperatively: the run stops at a checkpoint boundary and reports its outcome.
    cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    retry: {
      initialInterval: 1_000,
      backoffCoefficient: 2,
      maximumInterval: tuning.maxActivityRetryIntervalMs,
      maximumAttempts: tuning.maxActivityAttempts,
      nonRetryableErrorTypes: NON_RETRYABLE_TYPES,
    },
  });
  const decisions = proxyActivities<Activities>({
    startToCloseTimeout: 30_000,
    retry: {
      initialInterval: 1_000,
      maximumInterval: 15_000,
      maximumAttempts: 8,
      nonRetryableErrorTypes: ['InvalidDecision'],
    },
  });

  // ---- handlers -------------------------------------------------------------------------------------
  let activityScope: CancellationScope | null = null;
  // Written by handlers, read by the loop (typed with `as` so control flow does not narrow them to null).
  let pauseRequest = null as DecisionAudit | null;
  let resumeRequest = null as DecisionAudit | null;
  let gapRequest = null as Pending<GapResolution> | null;
  let bindingRequest = null as Pending<BindingResolution> | null;
  let quarantineRequest = null as Pending<QuarantineResolution> | null;
  let nextTicket = 1;
  /** Bumped by a pause or an accepted rebind: ends a backoff timer early. */
  let wakeups = 0;
  /** Tickets an update handler waits on (signals have nobody to answer). */
  const awaited = new Set<number>();
  /** ticket → null (applied) or the error that kept it from being applied */
  const results = new Map<number, string | null>();
  const settle = (ticket: number, error: string | null): void => {
    if (awaited.delete(ticket)) results.set(ticket, error);
  };

  const awaitResult = async (ticket: number): Promise<ConsumerStatus> => {
    awaited.add(ticket);
    await condition(() => results.has(ticket));
    const error = results.get(ticket);
    results.delete(ticket);
    if (error) throw ApplicationFailure.nonRetryable(error, 'DecisionNotApplied');
    return state.status();
  };
  const supersede = (previous: Pending<unknown> | null): void => {
    if (previous) settle(previous.ticket, 'superseded by a later decision before it was applied');
  };
  const requirePhase = (phase: ConsumerPhase, what: string): void => {
    if (state.phase !== phase) {
      throw new InvalidOperatorInput(`consumer ${id} is ${state.phase}, not ${phase}: no ${what} to take now`);
    }
  };
  /** Signals cannot be rejected: an invalid one is ignored and shows up as the last error. */
  const ignoreInvalid = (what: string, apply: () => void): void => {
    try {
      apply();
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      state.lastError = `ignored ${what} signal: ${message}`;
      log.warn('ignored invalid signal', { consumerId: id, signal: what, error: message });
      publish();
    }
  };

  const acceptGap = (raw: GapResolution): number => {
    const value = parseGapResolution(raw);
    requirePhase('awaiting_gap_decision', 'gap decision');
    supersede(gapRequest);
    gapRequest = { ticket: nextTicket++, value };
    return gapRequest.ticket;
  };
  const acceptBinding = (raw: BindingResolution): number => {
    const value = parseBindingResolution(raw);
    requirePhase('awaiting_binding_decision', 'binding decision');
    supersede(bindingRequest);
    bindingRequest = { ticket: nextTicket++, value };
    return bindingRequest.ticket;
  };
  const acceptQuarantine = (raw: QuarantineResolution): number => {
    const value = parseQuarantineResolution(raw);
    requirePhase('awaiting_quarantine_decision', 'quarantine decision');
    supersede(quarantineRequest);
    quarantineRequest = { ticket: nextTicket++, value };
    return quarantineRequest.ticket;
  };
  /** Why a rebind cannot be taken now, or null when it can. */
  const rebindRefusal = (): string | null => {
    if (state.phase === 'rebinding' || state.pendingRebind) return `consumer ${id} is already rebinding`;
    if (!RUNNING_PHASES.includes(state.phase)) {
      return `consumer ${id} is ${state.phase}${state.stop ? ` (${state.stop.reason})` : ''}: resolve that first`;
    }
    if (!state.committed?.token) return `consumer ${id} has no committed checkpoint yet: nothing to rebind from`;
    if (state.start.mode !== 'resume')
      return `consumer ${id} has an explicit ${state.start.mode} start pending its first commit`;
    return null;
  };
  const acceptRebind = (raw: RebindRequest): RebindRequest => {
    const request = parseRebindRequest(raw);
    const refusal = rebindRefusal();
    if (refusal) throw new InvalidOperatorInput(refusal);
    state.pendingRebind = { filter: request.filter, requestedBy: request.requestedBy };
    wakeups += 1;
    // The running lease stops at its next checkpoint boundary; the loop then starts the rebind.
    activityScope?.cancel();
    publish();
    return request;
  };

  setHandler(statusQuery, () => state.status());
  setHandler(resolveGapSignal, (resolution) => ignoreInvalid('resolveGap', () => void acceptGap(resolution)));
  setHandler(resolveBindingSignal, (resolution) =>
    ignoreInvalid('resolveBinding', () => void acceptBinding(resolution)),
  );
  setHandler(resolveQuarantineSignal, (resolution) =>
    ignoreInvalid('resolveQuarantine', () => void acceptQuarantine(resolution)),
  );
  setHandler(resolveGapUpdate, (resolution) => awaitResult(acceptGap(resolution)), {
    validator: (resolution) => {
      parseGapResolution(resolution);
      requirePhase('awaiting_gap_decision', 'gap decision');
    },
  });
  setHandler(resolveBindingUpdate, (resolution) => awaitResult(acceptBinding(resolution)), {
    validator: (resolution) => {
      parseBindingResolution(resolution);
      requirePhase('awaiting_binding_decision', 'binding decision');
    },
  });
  setHandler(resolveQuarantineUpdate, (resolution) => awaitResult(acceptQuarantine(resolution)), {
    validator: (resolution) => {
      parseQuarantineResolution(resolution);
      requirePhase('awaiting_quarantine_decision', 'quarantine decision');
    },
  });
  setHandler(
    rebindUpdate,
    (request) => {
      acceptRebind(request);
      return state.status();
    },
    {
      validator: (request) => {
        parseRebindRequest(request);
        const refusal = rebindRefusal();
        if (refusal) throw new InvalidOperatorInput(refusal);
      },
    },
  );
  setHandler(rebindSignal, async (raw) => {
    try {
      acceptRebind(raw);
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      state.lastError = `refused rebind: ${reason}`;
      publish();
      const replyTo = typeof raw?.replyTo === 'string' && raw.replyTo !== '' ? raw.replyTo : null;
      if (replyTo) {
        // The requester (rebindWorkflow) fails with this reason instead of waiting for a generation that never comes.
        await getExternalWorkflowHandle(replyTo)
          .signal(rebindRejectedSignal, { consumerId: id, phase: state.phase, reason })
          .catch((notifyError: unknown) =>
            log.warn('could not notify the rebind requester', { replyTo, error: String(notifyError) }),
          );
      }
    }
  });
  setHandler(pauseSignal, (audit) =>
    ignoreInvalid('pause', () => {
      pauseRequest = parseAudit(audit);
      wakeups += 1;
      activityScope?.cancel();
    }),
  );
  setHandler(resumeSignal, (audit) =>
    ignoreInvalid('resume', () => {
      resumeRequest = parseAudit(audit);
      pauseRequest = null;
    }),
  );

  // ---- visibility -----------------------------------------------------------------------------------
  let publishedPhase: ConsumerPhase | null = null;
  function publish(): void {
    if (state.phase !== publishedPhase) {
      upsertSearchAttributes([{ key: phaseSearchAttribute, value: state.phase }]);
      publishedPhase = state.phase;
    }
    setCurrentDetails(state.details(Date.now()));
  }
  const nowIso = (): string => new Date(Date.now()).toISOString();

  upsertSearchAttributes([{ key: consumerIdSearchAttribute, value: id }]);

  // ---- the loop -------------------------------------------------------------------------------------
  // A first start reads the database before anything else; an unreachable database is waited out on a durable timer.
  if (!input.carried) {
    while (!(await tryAdoptDatabaseState('first start'))) await sleep(nextBackoffDelay());
  }
  publish();

  let runsThisExecution = 0;
  for (;;) {
    if (state.phase === 'completed') {
      publish();
      await condition(allHandlersFinished);
      return state.status();
    }
    if (pauseRequest && RUNNING_PHASES.includes(state.phase)) {
      state.stopFor('paused', `paused by ${pauseRequest.actor}: ${pauseRequest.reason}`, nowIso());
      log.info('consumer paused', { consumerId: id, actor: pauseRequest.actor, reason: pauseRequest.reason });
      publish();
    }
    switch (state.phase) {
      case 'streaming':
      case 'rebinding':
        await runLease();
        runsThisExecution += 1;
        break;
      case 'backoff':
        await backoff();
        break;
      case 'paused':
        await waitForResume();
        break;
      case 'awaiting_gap_decision':
        await decideGap();
        break;
      case 'awaiting_binding_decision':
        await decideBinding();
        break;
      case 'awaiting_quarantine_decision':
        await decideQuarantine();
        break;
    }
    publish();
    if (
      RUNNING_PHASES.includes(state.phase) &&
      (workflowInfo().continueAsNewSuggested || runsThisExecution >= tuning.maxRunsPerExecution)
    ) {
      await condition(allHandlersFinished);
      // A handler that ran while we waited may have moved the state; carry it as it is now.
      if (pauseRequest) state.stopFor('paused', `paused by ${pauseRequest.actor}: ${pauseRequest.reason}`, nowIso());
      await continueAsNew<typeof consumerWorkflow>({ ...input, filter: state.filter, carried: state.carried() });
    }
  }

  /** Reads the committed checkpoint (the authority) and starts from it; an explicit first start only without one. */
  async function adoptDatabaseState(why: string): Promise<void> {
    const view = await decisions.loadCommitted({ consumerId: id });
    if (view.abandoned) {
      state.stopFor('completed', 'the consumer was abandoned by an earlier decision', nowIso());
      return;
    }
    if (view.summary.token !== null) {
      if (view.filter) state.filter = view.filter;
      state.committed = view.summary;
      if (view.pendingStart) state.start = { mode: view.pendingStart, filter: state.filter };
      else if (state.start.mode !== 'rebind') state.start = { mode: 'resume' };
    } else if (view.pendingStart) {
      state.start = { mode: view.pendingStart, filter: state.filter };
    }
    log.info('adopted the committed checkpoint', {
      consumerId: id,
      why,
      position: view.summary.position,
      start: state.start.mode,
    });
  }

  async function runLease(): Promise<void> {
    if (state.pendingRebind && state.start.mode === 'resume') {
      state.start = { mode: 'rebind', filter: state.pendingRebind.filter };
    }
    state.phase = state.runningPhase();
    publish();
    const scope = new CancellationScope();
    activityScope = scope;
    let outcome: ConsumeOutcome;
    try {
      outcome = await scope.run(() =>
        streaming.consumeStream({
          consumerId: id,
          subscriptionId: state.subscriptionId,
          start: state.start,
          leaseMs,
          expected: state.committed,
        }),
      );
    } catch (error) {
      handleRunFailure(error);
      return;
    } finally {
      activityScope = null;
    }
    state.adopt(outcome);
    state.lastError = null;
    handleOutcome(outcome);
  }

  function handleOutcome(outcome: ConsumeOutcome): void {
    switch (outcome.kind) {
      case 'lease_expired':
      case 'cancelled':
        // Loop: the next lease resumes; a pause or a rebind requested meanwhile is taken at the loop's top.
        return;
      case 'rebound':
        state.rebound();
        return;
      case 'reset_required':
        state.stopFor(
          'awaiting_gap_decision',
          `reset_required (${outcome.reason}): the server refused the saved token at position ${outcome.committed.position ?? 'none'}; ` +
            `history ${outcome.history.id} retains ${outcome.history.floor}..${outcome.history.head}. The token is kept until a decision`,
          nowIso(),
        );
        return;
      case 'cursor_mismatch':
        state.stopFor('awaiting_binding_decision', `cursor_mismatch: ${outcome.message}`, nowIso());
        return;
      case 'held_quarantine':
        state.stopFor(
          'awaiting_quarantine_decision',
          `held quarantine blocks the checkpoint: ` +
            outcome.items
              .map((item) => `${item.eventId} (${item.reason}, ${item.kind} ${item.entityId} at ${item.position})`)
              .join(', '),
          nowIso(),
        );
        return;
      case 'failed':
        state.stopFor(
          'paused',
          `stream failed (${outcome.code}): ${outcome.message}. Fix the cause, then resume`,
          nowIso(),
        );
        return;
    }
  }

  function handleRunFailure(error: unknown): void {
    if (isCancellation(error)) return; // cancelled before any outcome: nothing to adopt
    const cause = error instanceof ActivityFailure ? error.cause : error;
    const message = cause instanceof Error ? cause.message : String(cause);
    const type = cause instanceof ApplicationFailure ? cause.type : null;
    if (type === 'DatabaseBehind' || type === 'ConfigError') {
      state.stopFor('paused', `${type}: ${message}. Fix the cause; resume adopts the database's checkpoint`, nowIso());
      return;
    }
    // Retries exhausted (transport, overload, timeouts) or a lost lease: wait on a durable timer, keep the token.
    state.lastError = `${type ?? (cause instanceof Error ? cause.name : 'error')}: ${message}`;
    state.phase = 'backoff';
    log.warn('streaming run failed; backing off', { consumerId: id, error: state.lastError });
  }

  /** False (and in backoff, with the error shown) when the database could not be read. */
  async function tryAdoptDatabaseState(why: string): Promise<boolean> {
    try {
      await adoptDatabaseState(why);
    } catch (error) {
      state.lastError = `could not read the committed checkpoint: ${errorMessage(error)}`;
      state.phase = 'backoff';
      publish();
      return false;
    }
    if (state.phase === 'backoff') state.phase = state.runningPhase();
    state.backoffRounds = 0;
    return true;
  }

  function nextBackoffDelay(): number {
    const delay = Math.min(tuning.backoffInitialMs * 2 ** state.backoffRounds, tuning.backoffMaxMs);
    state.backoffRounds += 1;
    return delay;
  }

  async function backoff(): Promise<void> {
    const delay = nextBackoffDelay();
    publish();
    // A pause or a rebind ends the wait early; neither drops the committed token.
    const before = wakeups;
    await condition(() => wakeups !== before, delay);
    if (state.phase === 'backoff') state.phase = state.runningPhase();
  }

  async function waitForResume(): Promise<void> {
    await condition(() => resumeRequest !== null);
    const request = resumeRequest!;
    resumeRequest = null;
    try {
      await adoptDatabaseState(`resumed by ${request.actor}: ${request.reason}`);
    } catch (error) {
      // Still paused: the operator resumes again once the database answers.
      state.lastError = `resume could not read the committed checkpoint: ${errorMessage(error)}`;
      return;
    }
    if (state.phase === 'paused') {
      state.proceed();
      log.info('consumer resumed', { consumerId: id, actor: request.actor, reason: request.reason });
    }
  }

  async function decideGap(): Promise<void> {
    await condition(() => gapRequest !== null);
    const { ticket, value } = gapRequest!;
    gapRequest = null;
    if (!(await record(ticket, () => decisions.recordGapDecision({ consumerId: id, ...value })))) return;
    if (value.decision === 'abandon') {
      state.stopFor('completed', `abandoned by ${value.actor}: ${value.reason}`, nowIso());
      return;
    }
    state.start = { mode: value.decision, filter: state.startFilter() };
    state.proceed();
  }

  async function decideBinding(): Promise<void> {
    await condition(() => bindingRequest !== null);
    const { ticket, value } = bindingRequest!;
    bindingRequest = null;
    if (!(await record(ticket, () => decisions.recordBindingDecision({ consumerId: id, ...value })))) return;
    if (value.decision === 'abandon') {
      state.stopFor('completed', `abandoned by ${value.actor}: ${value.reason}`, nowIso());
      return;
    }
    // retry: the same start again with the exact saved binding; otherwise the explicit start decided.
    if (value.decision !== 'retry') state.start = { mode: value.decision, filter: state.startFilter() };
    state.proceed();
  }

  async function decideQuarantine(): Promise<void> {
    await condition(() => quarantineRequest !== null);
    const { ticket, value } = quarantineRequest!;
    quarantineRequest = null;
    if (!(await record(ticket, () => decisions.resolveQuarantine({ consumerId: id, ...value })))) return;
    // The blocked checkpoint is redelivered by the same start; the decision now lets it commit (or retries it).
    state.proceed();
  }

  /** Runs the recording activity; answers the waiting update either way. False: stay in the waiting phase. */
  async function record(ticket: number, write: () => Promise<unknown>): Promise<boolean> {
    try {
      await write();
    } catch (error) {
      const message = `decision not recorded: ${errorMessage(error)}`;
      state.lastError = message;
      settle(ticket, message);
      return false;
    }
    state.lastError = null;
    settle(ticket, null);
    return true;
  }
}

function errorMessage(error: unknown): string {
  const cause = error instanceof ActivityFailure && error.cause ? error.cause : error;
  return cause instanceof Error ? cause.message : String(cause);
}
