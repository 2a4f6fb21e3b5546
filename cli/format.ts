// Text renderings for operators. JSON output (--json) is the data itself; these are for eyes. Counts and progress
// use protocol/progress.ts's formats, as the main job's progress line and the workflow's Current Details do.
import type { OutboxRow, OutboxState } from '../db/index.js';
import { formatAge, formatAlerts, formatCount, formatProgress, formatTime } from '../protocol/progress.js';
import type { AlertState } from './args.js';
import { consumerProgress, totalCounters, type ConsumerReport } from './consumers.js';
import { retentionRows } from './retention.js';

const dash = '-';
const show = (value: string | number | null | undefined): string =>
  value === null || value === undefined ? dash : String(value);

/** Groups the integer part of a decimal string in thousands: "1234567.5" -> "1,234,567.5". */
export function groupDecimal(decimal: string): string {
  const [whole = '0', fraction] = decimal.split('.');
  const grouped = whole.replace(/\B(?=(\d{3})+(?!\d))/g, ',');
  return fraction === undefined ? grouped : `${grouped}.${fraction}`;
}

const SOURCES = {
  heartbeat: " (the running lease's heartbeat)",
  workflow: " (the workflow's last reading; no lease heartbeats now)",
};

export function formatStatus(report: ConsumerReport, nowMs: number): string {
  const { reading, source, rate } = consumerProgress(report, nowMs);
  const status = report.status;
  const db = report.database;
  const rows: [string, string][] = [];
  rows.push([
    'workflow',
    report.workflow
      ? `${report.workflow.workflowId} (${report.workflow.status}, run ${report.workflow.runId})`
      : 'none',
  ]);
  rows.push(['phase', status ? status.phase : report.statusError ? `unknown: ${report.statusError}` : dash]);
  if (report.workerHint) rows.push(['worker', report.workerHint]);
  rows.push(['progress', `${formatProgress(reading, rate)}${source ? SOURCES[source] : ''}`]);
  if (db) rows.push(['committed', `position ${formatCount(db.state.position)} (the database, read now)`]);
  rows.push([
    'generation',
    `${show(db?.state.generation ?? status?.committed?.generation)}   version ${show(db?.state.version ?? status?.committed?.version)}`,
  ]);
  if (db) {
    rows.push([
      'executions',
      `${formatCount(db.executions)}   markets ${formatCount(db.markets)}   volume ${groupDecimal(db.totalVolume)} USD`,
    ]);
    rows.push(['quarantine', `${formatCount(db.heldQuarantine)} held`]);
    rows.push([
      'alerts',
      `${formatAlerts(db.alerts)}${db.alerts.dead > 0 ? ` (see: ${alertsListCommand(report.consumerId)})` : ''}`,
    ]);
    if (db.state.pendingStart) rows.push(['pending start', db.state.pendingStart]);
    if (db.state.abandoned) rows.push(['abandoned', 'yes']);
    const d = db.lastDecision;
    rows.push(['last decision', d ? `${d.kind} ${d.decision} by ${d.actor} at ${d.decidedAt}: ${d.reason}` : 'none']);
    if (report.retention) rows.push(...retentionRows(report.retention));
  } else {
    rows.push([
      'database',
      report.databaseError ?? 'not consulted (set DATABASE_URL to see effects, quarantine and decisions)',
    ]);
  }
  if (status) {
    // Ended runs, the running one's latest report, and the database's counts of checkpoints and events.
    const c = totalCounters(report) ?? status.counters;
    rows.push([
      'last commit',
      c.lastCommitAt === null ? 'none yet' : `${formatTime(c.lastCommitAt)} (${c.lastCommitAt})`,
    ]);
    const total = (
      label: string,
      key: 'sessions' | 'checkpointsCommitted' | 'eventsApplied' | 'duplicates' | 'acksSent',
    ) => `${label} ${formatCount(c[key])}`;
    rows.push([
      'counters',
      [
        total('sessions', 'sessions'),
        total('checkpoints', 'checkpointsCommitted'),
        total('applied', 'eventsApplied'),
        total('duplicates', 'duplicates'),
        total('acks', 'acksSent'),
      ].join('   '),
    ]);
    rows.push(['filter', JSON.stringify(status.filter)]);
    if (status.stop) {
      rows.push(['waiting', `${status.stop.reason} (since ${status.stop.since})`]);
      rows.push(['resolve with', status.stop.resolveWith]);
    }
    if (status.pendingRebind)
      rows.push([
        'pending rebind',
        `${JSON.stringify(status.pendingRebind.filter)} by ${status.pendingRebind.requestedBy}`,
      ]);
    if (status.lastError) rows.push(['last error', `${status.lastError} (at ${status.lastErrorAt ?? 'unknown time'})`]);
  }
  const width = Math.max(...rows.map(([label]) => label.length));
  return [`consumer ${report.consumerId}`, ...rows.map(([label, value]) => `  ${label.padEnd(width)}  ${value}`)].join(
    '\n',
  );
}

/** Where `status` points when alerts failed for good. Consumer ids are shell-safe (args.ts ID_PATTERN). */
export function alertsListCommand(consumerId: string): string {
  return `whalehunt-consumer alerts list --consumer ${consumerId} --state dead`;
}

/** An alert's state in the words of `alerts list --state`: `sent` for done, `pending` for a row being sent too. */
export function alertState(status: OutboxState): AlertState {
  return status === 'done' ? 'sent' : status === 'claimed' ? 'pending' : status;
}

/** One alert as `alerts list --json` prints it: the row, with its state in the CLI's words beside the stored one. */
export function alertJson(row: OutboxRow): Record<string, unknown> {
  return {
    id: row.id,
    consumerId: row.consumerId,
    idempotencyKey: row.idempotencyKey,
    eventId: row.eventId,
    action: row.action,
    state: alertState(row.status),
    status: row.status,
    suppressedReason: row.suppressedReason,
    attempts: row.attempts,
    lastError: row.lastError,
    createdAt: row.createdAt,
    availableAt: row.availableAt,
    completedAt: row.completedAt,
    payload: row.payload,
  };
}

/** The `alerts list` table: id, consumer, key, state (with why it was suppressed), attempts, age, last error. */
export function formatAlertsTable(rows: readonly OutboxRow[], nowMs: number): string {
  const header = ['ID', 'CONSUMER', 'KEY', 'STATE', 'ATTEMPTS', 'AGE', 'LAST ERROR'];
  const state = (row: OutboxRow): string =>
    row.status === 'claimed'
      ? 'pending (being sent)'
      : row.status === 'suppressed'
        ? `suppressed (${row.suppressedReason ?? 'no reason'})`
        : alertState(row.status);
  const table = [
    header,
    ...rows.map((row) => [
      String(row.id),
      row.consumerId,
      row.idempotencyKey,
      state(row),
      String(row.attempts),
      formatAge((nowMs - Date.parse(row.createdAt)) / 1000),
      // As stored: the dispatcher names the receiver by its origin only, never the webhook URL.
      row.lastError ?? dash,
    ]),
  ];
  const widths = header.map((_, i) => Math.max(...table.map((row) => row[i]!.length)));
  return table
    .map((row) =>
      row
        .map((cell, i) => cell.padEnd(widths[i]!))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}
