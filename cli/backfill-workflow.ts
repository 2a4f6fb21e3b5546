// `backfill` on Temporal: starts backfillWorkflow (or attaches to the running one of the consumer) and, unless
// --detach, follows it through its status query, printing progress as it lands ("applied 1,746 of 1,750"; a
// tailing backfill never completes, so it is followed until Ctrl-C), until it completes at its target (exit 0) or
// waits for an operator (exit 1, naming the stop and the command that resolves it; the workflow keeps waiting).
// Also the backfill's side of `status`.
import { setTimeout as delay } from 'node:timers/promises';
import type pg from 'pg';
import { loadPageEventsApplied, loadPageProgress, type PageProgress } from '../db/pages.js';
import { canonicalJson } from '../protocol/canonical.js';
import { formatCount } from '../protocol/progress.js';
import { appliedText, targetText } from '../workflows/backfill-state.js';
import type { backfillWorkflow } from '../workflows/index.js';
import {
  backfillStatusQuery,
  backfillWorkflowId,
  type BackfillStatus,
  type BackfillWorkflowInput,
} from '../workflows/definitions.js';
import type { CliCommand } from './args.js';
import { loadCliConfig } from './config.js';
import {
  connectTemporal,
  withAnswerTimeout,
  workflowStart,
  type ConsumerWorkflow,
  type TemporalSession,
} from './consumers.js';
import { CliError } from './errors.js';
import { retentionRows, retentionView, type RetentionView } from './retention.js';

export interface BackfillWorkflowIo {
  out(text: string): void;
  err(text: string): void;
}

type BackfillCommand = Extract<CliCommand, { command: 'backfill' }>;

/** How often a waiting `backfill` asks the workflow for its status. */
const FOLLOW_INTERVAL_MS = 500;
const WAITING_PHASES: ReadonlySet<BackfillStatus['phase']> = new Set([
  'paused',
  'awaiting_gap_decision',
  'awaiting_quarantine_decision',
]);

export async function runBackfillWorkflow(
  cmd: BackfillCommand,
  env: NodeJS.ProcessEnv,
  io: BackfillWorkflowIo,
): Promise<number> {
  const session = await connectTemporal(loadCliConfig(env));
  try {
    const start = workflowStart(session, 'backfill', cmd.consumerId);
    const input: BackfillWorkflowInput = {
      consumerId: cmd.consumerId,
      filter: cmd.filter,
      ...(cmd.thenStream ? { thenStream: cmd.thenStream } : {}),
      ...(cmd.until !== undefined ? { until: cmd.until } : {}),
      ...(cmd.tail ? { tail: true } : {}),
    };
    const handle = await session.client.workflow.start<typeof backfillWorkflow>('backfillWorkflow', {
      ...start,
      args: [input],
      // A running backfill of the consumer is attached to, not doubled; a finished one may run again (it resumes
      // from the saved cursor).
      workflowIdConflictPolicy: 'USE_EXISTING',
    });
    const attached = handle.firstExecutionRunId;
    const target = cmd.tail
      ? 'no target: tailing'
      : cmd.until !== undefined
        ? `target ${formatCount(cmd.until)}`
        : "target: the source's head at the first page";
    io.out(
      `backfill ${cmd.consumerId}: workflow ${start.workflowId} run ${attached} (filter ${canonicalJson(cmd.filter)}, ${target}` +
        `${cmd.thenStream ? `, then the live stream, subscription ${cmd.thenStream.subscriptionId}` : ''})`,
    );
    if (cmd.detach) {
      io.out(`detached: follow it with \`whalehunt-consumer status --consumer ${cmd.consumerId}\``);
      return 0;
    }
    return await follow(session, cmd.consumerId, io);
  } finally {
    await session.close();
  }
}

/** Prints progress until the backfill completes (0) or waits for an operator (1). */
async function follow(session: TemporalSession, consumerId: string, io: BackfillWorkflowIo): Promise<number> {
  // Without a run id the handle follows continue-as-new to the current run.
  const handle = session.client.workflow.getHandle<typeof backfillWorkflow>(backfillWorkflowId(consumerId));
  let lastLine = '';
  for (;;) {
    const description = await handle.describe();
    if (description.status.name !== 'RUNNING') {
      if (description.status.name !== 'COMPLETED') {
        throw new CliError('backfill_failed', `backfill ${consumerId} ended ${description.status.name}`);
      }
      const final = await handle.result();
      io.out(progressLine(final));
      io.out(`completed: ${final.ending ?? 'done'}`);
      return 0;
    }
    const status = await withAnswerTimeout(session, 'backfill status query', () => handle.query(backfillStatusQuery));
    const line = progressLine(status);
    if (line !== lastLine) io.out(line);
    lastLine = line;
    if (WAITING_PHASES.has(status.phase) && status.stop) {
      io.out(`waiting (${status.phase}): ${status.stop.reason}`);
      io.out(`resolve with:\n${status.stop.resolveWith}`);
      return 1;
    }
    await delay(FOLLOW_INTERVAL_MS);
  }
}

/** One line per change: "  backfilling  applied 1,746 of 1,750  pages 50  new …", and why it waits at the head. */
export function progressLine(status: BackfillStatus): string {
  const c = status.counters;
  const waiting = status.waiting ? `  (${status.waiting.reason})` : '';
  return `  ${status.phase}  ${appliedText(status)}  pages ${c.pages}  new ${c.applied}  recognised ${c.recognised}  duplicates ${c.duplicates}  quarantined ${c.quarantined}${waiting}${status.lastError ? `  (last error: ${status.lastError})` : ''}`;
}

/** `status` for a backfill: the workflow's view (status query) and the database's (the page progress row). */
export async function showBackfillWorkflowStatus(
  session: TemporalSession,
  pool: pg.Pool | null,
  workflow: ConsumerWorkflow,
  consumerId: string,
  json: boolean,
  io: { out(text: string): void },
): Promise<void> {
  let status: BackfillStatus | null = null;
  let statusError: string | null = null;
  try {
    status = await withAnswerTimeout(session, 'status query', () => workflow.handle.query(backfillStatusQuery), 5_000);
  } catch (error) {
    statusError = error instanceof Error ? error.message : String(error);
  }
  let database: (PageProgress & { eventsApplied: number | null }) | null = null;
  let databaseError: string | null = null;
  let retention: RetentionView | null = null;
  if (pool) {
    try {
      const [progress, eventsApplied] = await Promise.all([
        loadPageProgress(pool, consumerId),
        loadPageEventsApplied(pool, consumerId),
      ]);
      database = progress && { ...progress, eventsApplied };
    } catch (error) {
      databaseError = error instanceof Error ? error.message : String(error);
    }
    // Without migration 0006 (a worker not restarted since the upgrade) there is no maintenance_runs: the rest stands.
    if (databaseError === null) retention = await retentionView(pool).catch(() => null);
  }
  const { description } = workflow;
  const summary = {
    consumerId,
    kind: 'backfill' as const,
    workflow: {
      workflowId: workflow.handle.workflowId,
      runId: description.runId,
      status: description.status.name,
      startTime: description.startTime.toISOString(),
    },
    status,
    statusError,
    database,
    databaseError,
    retention,
  };
  if (json) {
    io.out(JSON.stringify(summary, null, 2));
    return;
  }
  const rows: [string, string][] = [
    ['kind', 'backfill (paginated history source)'],
    ['workflow', `${summary.workflow.workflowId} (${summary.workflow.status}, run ${summary.workflow.runId})`],
    ['phase', status ? status.phase : `unknown: ${statusError}`],
  ];
  if (database) {
    rows.push(['applied position', `${database.appliedPosition}   version ${database.version}`]);
    if (database.eventsApplied !== null) rows.push(['events applied', formatCount(database.eventsApplied)]);
    rows.push(['resume cursor', database.resumeCursor === null ? 'none (the retention floor)' : 'saved']);
  } else {
    rows.push([
      'database',
      databaseError ??
        (pool ? 'no page progress (not run yet, or handed over to the stream)' : 'not consulted (set DATABASE_URL)'),
    ]);
  }
  if (status) {
    rows.push(['progress', appliedText(status)]);
    rows.push(['target', targetText(status)]);
    if (status.sourceHead !== undefined && status.sourceHead !== null)
      rows.push(['source head', `${formatCount(status.sourceHead)} (as the last page run saw it)`]);
    if (status.waiting) rows.push(['at the head', `${status.waiting.reason} (until ${status.waiting.until})`]);
    const c = status.counters;
    rows.push([
      'counters',
      `runs ${status.runs}   pages ${c.pages}   new ${c.applied}   recognised ${c.recognised}   duplicates ${c.duplicates}   quarantined ${c.quarantined}`,
    ]);
    rows.push(['filter', canonicalJson(status.filter)]);
    if (status.thenStream && !status.tail)
      rows.push(['then', `live stream, subscription ${status.thenStream.subscriptionId}`]);
    if (status.handover)
      rows.push([
        'handed over',
        `to ${status.handover.workflowId} at ${status.handover.at}, applied position ${formatCount(status.handover.appliedPosition)}`,
      ]);
    if (status.ending) rows.push(['ended', status.ending]);
    if (status.stop) {
      rows.push(['waiting', `${status.stop.reason} (since ${status.stop.since})`]);
      rows.push(['resolve with', status.stop.resolveWith]);
    }
    if (status.lastError) rows.push(['last error', status.lastError]);
  }
  if (retention) rows.push(...retentionRows(retention));
  const width = Math.max(...rows.map(([label]) => label.length));
  io.out([`consumer ${consumerId}`, ...rows.map(([label, value]) => `  ${label.padEnd(width)}  ${value}`)].join('\n'));
}
