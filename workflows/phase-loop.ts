// The loop both workflows of a consumer run (the stream consumer and the backfill): a pause requested is taken at
// the top of a running phase, then the phase's step, then publish; continue-as-new (once every handler finished)
// when Temporal suggests it or after enough runs in this execution. Deterministic: workflow APIs only.
import {
  allHandlersFinished,
  condition,
  setCurrentDetails,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import { phaseSearchAttribute } from './definitions.js';

/** A workflow's phase steps, as the loop drives them (DecisionSteps and its two workflows' subclasses). */
export interface PhaseSteps<Phase extends string, Status> {
  readonly state: { readonly phase: Phase; status(): Status };
  pauseRequested(): boolean;
  stopForPause(): void;
  /** Search attributes and Current Details. */
  publish(): void;
  /** Runs the phase's step; true when it ran an activity lease (those count toward continue-as-new). */
  step(phase: Phase): Promise<boolean>;
}

export interface PhaseLoop<Phase extends string> {
  readonly runningPhases: readonly Phase[];
  readonly maxRunsPerExecution: number;
  continueAsNew(): Promise<never>;
}

/**
 * What publishes a workflow's state: its phase as a search attribute (only when the phase changed) and its Current
 * Details (every time).
 */
export function phasePublisher(state: { readonly phase: string }, details: () => string): () => void {
  let publishedPhase: string | null = null;
  return () => {
    if (state.phase !== publishedPhase) {
      upsertSearchAttributes([{ key: phaseSearchAttribute, value: state.phase }]);
      publishedPhase = state.phase;
    }
    setCurrentDetails(details());
  };
}

/** Runs until the phase is `completed`, and returns the final status. */
export async function runPhaseLoop<Phase extends string, Status>(
  steps: PhaseSteps<Phase, Status>,
  loop: PhaseLoop<Phase>,
): Promise<Status> {
  const { state } = steps;
  const running = (): boolean => loop.runningPhases.includes(state.phase);
  let runsThisExecution = 0;
  for (;;) {
    if (state.phase === 'completed') {
      steps.publish();
      await condition(allHandlersFinished);
      return state.status();
    }
    if (running() && steps.pauseRequested()) {
      steps.stopForPause();
      steps.publish();
    }
    if (await steps.step(state.phase)) runsThisExecution += 1;
    steps.publish();
    if (running() && (workflowInfo().continueAsNewSuggested || runsThisExecution >= loop.maxRunsPerExecution)) {
      await condition(allHandlersFinished);
      // A handler that ran while we waited may have moved the state; carry it as it is now.
      if (steps.pauseRequested()) steps.stopForPause();
      await loop.continueAsNew();
    }
  }
}
