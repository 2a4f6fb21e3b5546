// The backfill workflow: one per page consumer (id `whalehunt-backfill:<consumerId>`). It runs the page activity
// (docs/protocol.md §8) a bounded number of pages at a time, adopts each run's saved progress (the database is
// the authority) and stops in a named waiting phase whenever an operator must decide (a held quarantine, a
// refused cursor). It completes at its target, fixed when it starts (the source's head at its first page, or the
// start's `until`), optionally handing the consumer id over to the live stream consumer; a tailing backfill has no
// target and waits at the head on a growing durable timer. The handlers hand requests to the shared inbox; the
// loop takes them in its steps.
import { condition, continueAsNew, log, setHandler, upsertSearchAttributes } from '@temporalio/workflow';
import { BackfillInbox } from './backfill-inbox.js';
import { BACKFILL_RUNNING_PHASES, BackfillState } from './backfill-state.js';
import { BackfillSteps } from './backfill-steps.js';
import { phasePublisher, runPhaseLoop } from './phase-loop.js';
import { DEFAULT_TUNING } from './consumer-steps.js';
import {
  backfillResolveGapUpdate,
  backfillResolveQuarantineUpdate,
  backfillStatusQuery,
  consumerIdSearchAttribute,
  DEFAULT_PAGES_PER_RUN,
  kindSearchAttribute,
  pauseSignal,
  resolveGapSignal,
  resolveQuarantineSignal,
  resumeSignal,
  type BackfillStatus,
  type BackfillWorkflowInput,
  type GapResolution,
  type QuarantineResolution,
} from './definitions.js';

export async function backfillWorkflow(input: BackfillWorkflowInput): Promise<BackfillStatus> {
  const tuning = { ...DEFAULT_TUNING, ...input.tuning };
  const state = new BackfillState(input);

  const publish = phasePublisher(state, () => state.details(steps.lastRunAt));
  const inbox = new BackfillInbox(state, {
    interruptRun: () => steps.interruptRun(),
    publish,
    warn: (message, attributes) => log.warn(message, attributes),
  });
  const steps = new BackfillSteps({
    state,
    inbox,
    tuning,
    pagesPerRun: input.pagesPerRun ?? DEFAULT_PAGES_PER_RUN,
    publish,
  });

  setHandlers(state, inbox);
  upsertSearchAttributes([
    { key: consumerIdSearchAttribute, value: state.consumerId },
    { key: kindSearchAttribute, value: 'backfill' },
  ]);
  publish();

  return runPhaseLoop(steps, {
    runningPhases: BACKFILL_RUNNING_PHASES,
    maxRunsPerExecution: tuning.maxRunsPerExecution,
    continueAsNew: () => continueAsNew<typeof backfillWorkflow>({ ...input, carried: state.carried() }),
  });
}

function setHandlers(state: BackfillState, inbox: BackfillInbox): void {
  const awaitResult = async (ticket: number): Promise<BackfillStatus> => {
    inbox.expectResult(ticket);
    await condition(() => inbox.hasResult(ticket));
    return inbox.takeResult(ticket);
  };
  setHandler(backfillStatusQuery, () => state.status());
  setHandler(resolveGapSignal, (resolution) => inbox.ignoreInvalid('resolveGap', () => inbox.acceptGap(resolution)));
  setHandler(resolveQuarantineSignal, (resolution) =>
    inbox.ignoreInvalid('resolveQuarantine', () => inbox.acceptQuarantine(resolution)),
  );
  setHandler(backfillResolveGapUpdate, (resolution) => awaitResult(inbox.acceptGap(resolution)), {
    validator: (resolution: GapResolution) => inbox.validateGap(resolution),
  });
  setHandler(backfillResolveQuarantineUpdate, (resolution) => awaitResult(inbox.acceptQuarantine(resolution)), {
    validator: (resolution: QuarantineResolution) => inbox.validateQuarantine(resolution),
  });
  setHandler(pauseSignal, (audit) => inbox.ignoreInvalid('pause', () => inbox.requestPause(audit)));
  setHandler(resumeSignal, (audit) => inbox.ignoreInvalid('resume', () => inbox.requestResume(audit)));
}
