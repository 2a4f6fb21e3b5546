// Passes the streaming run's progress readings on to its workflow as a `progress` signal, so Current Details
// stays live between leases. Throttled to one signal per `everyMs` (each adds a few events to the workflow's
// history) and one in flight at a time; a signal that fails is logged and the run goes on (the next reading
// tries again): the display must never stop the stream.
import { Context } from '@temporalio/activity';
import type { ProgressReading } from '../protocol/progress.js';
import type { ConsumeStreamLog } from './consume-stream.js';
import { PROGRESS_SIGNAL_NAME } from './types.js';

/** At most one progress signal per this long: about 4,300 signals a day per streaming consumer. */
export const PROGRESS_REPORT_EVERY_MS = 20_000;

export function throttledReporter(
  send: (reading: ProgressReading) => Promise<void>,
  onError: (error: unknown) => void,
  everyMs: number = PROGRESS_REPORT_EVERY_MS,
  nowMs: () => number = Date.now,
): (reading: ProgressReading) => void {
  let lastSentAt = -Infinity;
  let inFlight = false;
  return (reading) => {
    const now = nowMs();
    if (inFlight || now - lastSentAt < everyMs) return;
    lastSentAt = now;
    inFlight = true;
    // A send that throws at once (no client while the worker shuts down) is a failed send like any other.
    Promise.resolve()
      .then(() => send(reading))
      .catch(onError)
      .finally(() => {
        inFlight = false;
      });
  };
}

/** The reporter of the current activity: signals the workflow run that scheduled it. */
export function workflowProgressReporter(log: ConsumeStreamLog): (reading: ProgressReading) => void {
  const ctx = Context.current();
  const execution = ctx.info.workflowExecution;
  if (!execution) return () => undefined; // not scheduled by a workflow: nobody to tell
  const { workflowId, runId } = execution;
  return throttledReporter(
    (reading) =>
      ctx.client.workflow.getHandle(workflowId, runId).signal<[ProgressReading]>(PROGRESS_SIGNAL_NAME, reading),
    (error) =>
      log.warn('could not report progress to the workflow', {
        workflowId,
        error: error instanceof Error ? error.message : String(error),
      }),
  );
}
