// `maintenance`: one retention run now, as the schedule runs it (maintenanceWorkflow on a worker of TASK_QUEUE, with
// that worker's policy), waited for and reported.
import { randomUUID } from 'node:crypto';
import { WorkflowFailedError } from '@temporalio/client';
import type { MaintenanceReport } from '../db/index.js';
import { formatCount } from '../protocol/progress.js';
import type { maintenanceWorkflow } from '../workflows/index.js';
import {
  kindSearchAttribute,
  MAINTENANCE_KIND,
  MAINTENANCE_WORKFLOW_ID_PREFIX,
  phaseSearchAttribute,
} from '../workflows/definitions.js';
import type { CliCommand } from './args.js';
import { ANSWER_TIMEOUT_MS, workflowPollers, type TemporalSession } from './consumers.js';
import { CliError } from './errors.js';
import { noAnswerHint } from './worker-hint.js';

/** Starts maintenanceWorkflow under a fresh id, waits for it and prints its report. */
export async function runMaintenanceNow(
  session: TemporalSession,
  cmd: Extract<CliCommand, { command: 'maintenance' }>,
  io: { out(text: string): void; err(text: string): void },
): Promise<void> {
  const workflowId = `${MAINTENANCE_WORKFLOW_ID_PREFIX}cli-${randomUUID()}`;
  const handle = await session.client.workflow.start<typeof maintenanceWorkflow>('maintenanceWorkflow', {
    workflowId,
    taskQueue: session.config.taskQueue,
    args: [{ requestedBy: `${cmd.actor} (whalehunt-consumer maintenance)` }],
    typedSearchAttributes: [
      { key: kindSearchAttribute, value: MAINTENANCE_KIND },
      { key: phaseSearchAttribute, value: 'maintaining' },
    ],
  });
  if (!cmd.json) io.out(`maintenance workflow ${workflowId} started on task queue ${session.config.taskQueue}`);
  // A run waits for a worker of the task queue: when none polls it, say so at once rather than wait in silence
  // (Temporal lists every poller of the last minutes, so an empty list is no worker, not one between two polls), and
  // again if none polls once the run has waited ANSWER_TIMEOUT_MS (the worker that took it may have gone since).
  const sayIfNoWorkerPolls = (prefix: string) =>
    void workflowPollers(session).then((pollers) => {
      if (pollers?.length === 0) {
        const why = noAnswerHint({ taskQueue: session.config.taskQueue, pollers, attempt: null, nowMs: Date.now() });
        io.err(`${prefix}: ${why}`);
      }
    });
  sayIfNoWorkerPolls('waiting');
  const hint = setTimeout(() => sayIfNoWorkerPolls('still waiting'), ANSWER_TIMEOUT_MS);
  let report: MaintenanceReport;
  try {
    report = await handle.result();
  } catch (error) {
    if (!(error instanceof WorkflowFailedError)) throw error;
    // The workflow failed with its activity's failure; that one's cause says what went wrong.
    const activity = error.cause;
    const cause = activity?.cause instanceof Error ? activity.cause : (activity ?? error);
    throw new CliError(
      'maintenance_failed',
      `maintenance workflow ${workflowId} failed: ${cause.message} (the next run goes on from where it stopped)`,
      { cause: error },
    );
  } finally {
    clearTimeout(hint);
  }
  io.out(cmd.json ? JSON.stringify({ workflowId, ...report }, null, 2) : formatMaintenanceReport(report));
}

/** The report as text: what each table lost, each consumer's floor and how far its receipts are gone. */
export function formatMaintenanceReport(report: MaintenanceReport): string {
  const ms = Date.parse(report.finishedAt) - Date.parse(report.startedAt);
  const lines = [
    `maintenance run ${report.runId}: ${report.startedAt} to ${report.finishedAt} (${formatCount(ms)} ms)`,
    `  removed  ${formatCount(report.receiptsDeleted)} receipts, ${formatCount(report.outboxDeleted)} outbox rows, ${formatCount(report.revisionsDeleted)} revisions`,
  ];
  if (report.consumers.length === 0) lines.push('  no consumer has announced a retention floor yet');
  for (const c of report.consumers) {
    const skipped = c.skipped === undefined ? '' : ` (${c.skipped.replace(/_/g, ' ')})`;
    lines.push(
      `  consumer ${c.consumerId}: history ${c.historyId}, floor ${c.floor}, receipts gone below ${c.prunedBelow}, ${formatCount(c.receiptsDeleted)} removed now${skipped}`,
    );
  }
  return lines.join('\n');
}
