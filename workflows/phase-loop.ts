// The loop both workflows of a consumer run (the stream consumer and the backfill): a pause requested is taken at
// the top of a running phase, then the phase's step, then publish; continue-as-new (once every handler finished)
// when Temporal suggests it or after enough runs in this execution. Deterministic: workflow APIs only.
import { allHandlersFinished, condition, workflowInfo } from '@temporalio/workflow';

export interface PhaseLoop<Phase extends string, Status> {
  readonly state: { readonly phase: Phase; status(): Status };
  readonly runningPhases: readonly Phase[];
  readonly maxRunsPerExecution: number;
  pauseRequested(): boolean;
  stopForPause(): void;
  /** Search attributes and Current Details. */
  publish(): void;
  /** Runs the phase's step; true when it ran an activity lease (those count toward continue-as-new). */
  step(phase: Phase): Promise<boolean>;
  continueAsNew(): Promise<never>;
}

/** Runs until the phase is `completed`, and returns the final status. */
export async function runPhaseLoop<Phase extends string, Status>(loop: PhaseLoop<Phase, Status>): Promise<Status> {
  const { state } = loop;
  const running = (): boolean => loop.runningPhases.includes(state.phase);
  let runsThisExecution = 0;
  for (;;) {
    if (state.phase === 'completed') {
      loop.publish();
      await condition(allHandlersFinished);
      return state.status();
    }
    if (running() && loop.pauseRequested()) {
      loop.stopForPause();
      loop.publish();
    }
    if (await loop.step(state.phase)) runsThisExecution += 1;
    loop.publish();
    if (running() && (workflowInfo().continueAsNewSuggested || runsThisExecution >= loop.maxRunsPerExecution)) {
      await condition(allHandlersFinished);
      // A handler that ran while we waited may have moved the state; carry it as it is now.
      if (loop.pauseRequested()) loop.stopForPause();
      await loop.continueAsNew();
    }
  }
}
