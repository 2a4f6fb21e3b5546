// One retention run (docs/design.md#retention), started by the worker's maintenance Schedule (MAINTENANCE_EVERY) or
// by `whalehunt-consumer maintenance`: the runMaintenance activity removes what a consumer may forget, heartbeating
// as it goes. Its phase is the WhalehuntPhase search attribute (`maintaining`, then `maintained` or `failed`) and
// Current Details shows the run's report. Deterministic: workflow APIs only.
import { proxyActivities, setCurrentDetails, upsertSearchAttributes, workflowInfo } from '@temporalio/workflow';
import type { Activities } from '../activities/index.js';
import type { MaintenanceReport } from '../activities/types.js';
import { formatCount, formatTime } from '../protocol/progress.js';
import {
  kindSearchAttribute,
  MAINTENANCE_KIND,
  phaseSearchAttribute,
  type MaintenancePhase,
  type MaintenanceWorkflowInput,
} from './definitions.js';

/**
 * A run removes in statements bounded at a second each and heartbeats after each one and every HEARTBEAT_MS, so a
 * lost worker shows within the heartbeat timeout; the next attempt simply runs again (a run removes only what is
 * still there, from where the last one stopped). Two hours bound a run over a very large backlog.
 */
const MAINTENANCE_ACTIVITY = {
  startToCloseTimeout: '2h',
  heartbeatTimeout: '30s',
  retry: { initialInterval: '10s', backoffCoefficient: 2, maximumInterval: '5m', maximumAttempts: 5 },
} as const;

/** `input` may be left out (a run started by hand from the UI). */
export async function maintenanceWorkflow(
  input: MaintenanceWorkflowInput = { requestedBy: 'someone unnamed (no input)' },
): Promise<MaintenanceReport> {
  const { runMaintenance } = proxyActivities<Activities>(MAINTENANCE_ACTIVITY);
  const startedAt = new Date(Date.now()).toISOString();
  const publish = (phase: MaintenancePhase, body: string[]): void => {
    upsertSearchAttributes([
      { key: kindSearchAttribute, value: MAINTENANCE_KIND },
      { key: phaseSearchAttribute, value: phase },
    ]);
    setCurrentDetails(
      [`## Maintenance: ${phase}`, '', `Requested by ${input.requestedBy}, started ${formatTime(startedAt)}.`, ...body]
        // The Temporal UI (2.42) sizes the panel about 26 px short of its content: let that be an empty line.
        .concat('', '&nbsp;')
        .join('\n'),
    );
  };
  publish('maintaining', []);
  try {
    const report = await runMaintenance();
    publish('maintained', maintenanceReportDetails(report));
    return report;
  } catch (error) {
    // An activity's failure names the activity; its cause says what went wrong.
    const cause = error instanceof Error && error.cause instanceof Error ? error.cause : error;
    const message = cause instanceof Error ? cause.message : String(cause);
    publish('failed', [
      '',
      `Failed (workflow ${workflowInfo().workflowId}): ${message}`,
      '',
      'The next run goes on from where this one stopped.',
    ]);
    throw error;
  }
}

/** A report as Current Details shows it: removed rows by table, each consumer's floor, the run's duration. */
export function maintenanceReportDetails(report: MaintenanceReport): string[] {
  const ms = Date.parse(report.finishedAt) - Date.parse(report.startedAt);
  const lines = [
    '',
    '| | |',
    '| --- | --- |',
    `| run | ${report.runId}: ${formatTime(report.startedAt)} to ${formatTime(report.finishedAt)}, ${formatCount(ms)} ms |`,
    `| removed | ${formatCount(report.receiptsDeleted)} receipts, ${formatCount(report.outboxDeleted)} outbox rows, ${formatCount(report.revisionsDeleted)} revisions |`,
  ];
  if (report.consumers.length === 0) return [...lines, '', 'No consumer has announced a retention floor yet.'];
  lines.push('', '| consumer | history | floor | pruned below | receipts removed |', '| --- | --- | --- | --- | --- |');
  for (const c of report.consumers) {
    const skipped = c.skipped === undefined ? '' : ` (${c.skipped.replace(/_/g, ' ')})`;
    lines.push(
      `| ${c.consumerId} | ${c.historyId} | ${c.floor} | ${c.prunedBelow} | ${formatCount(c.receiptsDeleted)}${skipped} |`,
    );
  }
  return lines;
}
