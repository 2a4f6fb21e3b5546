// The consumer workflow: one per consumer (id `whalehunt-consumer:<consumerId>`). It runs the streaming
// activity lease after lease, adopts each run's committed summary (the database is the authority), and
// stops in a named waiting phase whenever the protocol demands an operator decision. Nothing here jumps a
// gap, changes a binding or releases a quarantine by itself. The handlers only hand requests to the inbox
// (consumer-inbox.ts); the loop below takes them in its phase steps (consumer-steps.ts).
import {
  condition,
  continueAsNew,
  getExternalWorkflowHandle,
  log,
  setHandler,
  sleep,
  upsertSearchAttributes,
} from '@temporalio/workflow';
import { isProgressReading } from '../protocol/progress.js';
import { ConsumerInbox } from './consumer-inbox.js';
import { ConsumerState, RUNNING_PHASES } from './consumer-state.js';
import { ConsumerSteps, DEFAULT_TUNING } from './consumer-steps.js';
import { phasePublisher, runPhaseLoop } from './phase-loop.js';
import {
  consumerIdSearchAttribute,
  DEFAULT_LEASE_MS,
  kindSearchAttribute,
  pauseSignal,
  PROGRESS_SIGNAL,
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
  ConsumerStatus,
  ConsumerWorkflowInput,
  GapResolution,
  QuarantineResolution,
  RebindRequest,
} from './definitions.js';

export async function consumerWorkflow(input: ConsumerWorkflowInput): Promise<ConsumerStatus> {
  const tuning = { ...DEFAULT_TUNING, ...input.tuning };
  const state = new ConsumerState(input);
  const id = state.consumerId;

  const publish = phasePublisher(state, () => state.details(Date.now()));
  const inbox = new ConsumerInbox(state, {
    interruptRun: () => steps.interruptRun(),
    publish,
    warn: (message, attributes) => log.warn(message, attributes),
  });
  const steps = new ConsumerSteps({ state, inbox, tuning, leaseMs: input.leaseMs ?? DEFAULT_LEASE_MS, publish });

  setHandlers(state, inbox, publish);
  upsertSearchAttributes([
    { key: consumerIdSearchAttribute, value: id },
    { key: kindSearchAttribute, value: 'stream' },
  ]);

  // ---- the loop -------------------------------------------------------------------------------------
  // A first start reads the database before anything else; an unreachable database is waited out on a durable timer.
  if (!input.carried) {
    while (!(await steps.tryAdoptDatabaseState('first start'))) await sleep(steps.nextBackoffDelay());
  }
  publish();

  return runPhaseLoop(steps, {
    runningPhases: RUNNING_PHASES,
    maxRunsPerExecution: tuning.maxRunsPerExecution,
    continueAsNew: () =>
      continueAsNew<typeof consumerWorkflow>({ ...input, filter: state.filter, carried: state.carried() }),
  });
}

/** The handlers are thin: the inbox accepts or refuses, the loop takes what was accepted. */
function setHandlers(state: ConsumerState, inbox: ConsumerInbox, publish: () => void): void {
  const awaitResult = async (ticket: number): Promise<ConsumerStatus> => {
    inbox.expectResult(ticket);
    await condition(() => inbox.hasResult(ticket));
    return inbox.takeResult(ticket);
  };
  setHandler(statusQuery, () => state.status());
  // The streaming run's reading (at most every 20 s): Current Details stays live between leases.
  setHandler(PROGRESS_SIGNAL, (reading) => {
    if (!isProgressReading(reading))
      return log.warn('ignored a malformed progress signal', { consumerId: state.consumerId });
    state.noteReading(reading);
    publish();
  });
  setHandler(resolveGapSignal, (resolution) => inbox.ignoreInvalid('resolveGap', () => inbox.acceptGap(resolution)));
  setHandler(resolveBindingSignal, (resolution) =>
    inbox.ignoreInvalid('resolveBinding', () => inbox.acceptBinding(resolution)),
  );
  setHandler(resolveQuarantineSignal, (resolution) =>
    inbox.ignoreInvalid('resolveQuarantine', () => inbox.acceptQuarantine(resolution)),
  );
  setHandler(resolveGapUpdate, (resolution) => awaitResult(inbox.acceptGap(resolution)), {
    validator: (resolution: GapResolution) => inbox.validateGap(resolution),
  });
  setHandler(resolveBindingUpdate, (resolution) => awaitResult(inbox.acceptBinding(resolution)), {
    validator: (resolution: BindingResolution) => inbox.validateBinding(resolution),
  });
  setHandler(resolveQuarantineUpdate, (resolution) => awaitResult(inbox.acceptQuarantine(resolution)), {
    validator: (resolution: QuarantineResolution) => inbox.validateQuarantine(resolution),
  });
  setHandler(
    rebindUpdate,
    (request) => {
      inbox.acceptRebind(request);
      return state.status();
    },
    { validator: (request: RebindRequest) => inbox.validateRebind(request) },
  );
  setHandler(rebindSignal, async (request) => {
    const refused = inbox.rebindBySignal(request);
    if (!refused?.replyTo) return;
    // The requester (rebindWorkflow) fails with this reason instead of waiting for a generation that never comes.
    const { replyTo, rejection } = refused;
    await getExternalWorkflowHandle(replyTo)
      .signal(rebindRejectedSignal, rejection)
      .catch((notifyError: unknown) =>
        log.warn('could not notify the rebind requester', { replyTo, error: String(notifyError) }),
      );
  });
  setHandler(pauseSignal, (audit) => inbox.ignoreInvalid('pause', () => inbox.requestPause(audit)));
  setHandler(resumeSignal, (audit) => inbox.ignoreInvalid('resume', () => inbox.requestResume(audit)));
}
