// Passes the streaming run's progress readings on to its workflow as a `progress` signal, so Current Details
// stays live between leases: the reading, the run's report of itself (its counters, the database's version and
// totals after its last commit) and the consumer's alert figures. Throttled to one signal per `everyMs` (each adds
// a few events to the workflow's history) and one in flight at a time; a signal that fails is logged and the run
// goes on (the next reading tries again): the display must never stop the stream. The alert figures are read once
// per signal sent (never per event or frame); a failed read sends the reading without them.
import { Context } from '@temporalio/activity';
import type { AlertFigures, ProgressReading } from '../protocol/progress.js';
import type { ConsumeStreamLog } from './stream-ports.js';
import { PROGRESS_SIGNAL_NAME, type RunReport, type StreamProgressReport } from './types.js';

/** At most one progress signal per this long: about 4,300 signals a day per streaming consumer. */
export const PROGRESS_REPORT_EVERY_MS = 20_000;

export function throttledReporter<T>(
  send: (report: T) => Promise<void>,
  onError: (error: unknown) => void,
  everyMs: number = PROGRESS_REPORT_EVERY_MS,
  nowMs: () => number = Date.now,
): (report: T) => void {
  let lastSentAt = -Infinity;
  let inFlight = false;
  return (report) => {
    const now = nowMs();
    if (inFlight || now - lastSentAt < everyMs) return;
    lastSentAt = now;
    inFlight = true;
    // A send that throws at once (no client while the worker shuts down) is a failed send like any other.
    Promise.resolve()
      .then(() => send(report))
      .catch(onError)
      .finally(() => {
        inFlight = false;
      });
  };
}

/**
 * A reading with the alert figures `readAlerts` gives, read now; without them when there is no reader or the read
 * fails (logged): the position is worth sending all the same.
 */
export async function withAlerts<R extends ProgressReading>(
  reading: R,
  readAlerts: (() => Promise<AlertFigures>) | undefined,
  onError: (error: unknown) => void,
): Promise<R & { alerts?: AlertFigures }> {
  if (!readAlerts) return reading;
  try {
    const { pending, dead, oldestPendingSeconds } = await readAlerts();
    return { ...reading, alerts: { pending, dead, oldestPendingSeconds } };
  } catch (error) {
    onError(error);
    return reading;
  }
}

/**
 * The reporter of the current activity: signals the workflow run that scheduled it, with the alert figures
 * `readAlerts` reads (the consumer's outbox summary) when given, and on a retried attempt's first report its number.
 */
export function workflowProgressReporter(
  log: ConsumeStreamLog,
  readAlerts?: () => Promise<AlertFigures>,
): (reading: ProgressReading, run: RunReport) => void {
  const ctx = Context.current();
  const execution = ctx.info.workflowExecution;
  if (!execution) return () => undefined; // not scheduled by a workflow: nobody to tell
  const { workflowId, runId } = execution;
  const alertsUnreadable = (error: unknown): void =>
    log.warn('could not read the alert figures for the progress report', {
      workflowId,
      error: error instanceof Error ? error.message : String(error),
    });
  // A retried attempt took over from one that stopped heartbeating: its first report says so (the server retried
  // it, so the workflow hears of the takeover only this way).
  let takeoverUntold = ctx.info.attempt > 1;
  const report = throttledReporter<StreamProgressReport>(
    async (progress) => {
      const signalled = await withAlerts(progress, readAlerts, alertsUnreadable);
      const told = takeoverUntold ? { ...signalled, takeoverAttempt: ctx.info.attempt } : signalled;
      await ctx.client.workflow.getHandle(workflowId, runId).signal<[StreamProgressReport]>(PROGRESS_SIGNAL_NAME, told);
      takeoverUntold = false;
    },
    (error) =>
      log.warn('could not report progress to the workflow', {
        workflowId,
        error: error instanceof Error ? error.message : String(error),
      }),
  );
  return (reading, run) => report({ ...reading, run });
}
