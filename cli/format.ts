// Text renderings for operators. JSON output (--json) is the data itself; these are for eyes.
import { headAndLag, totalCounters, type ConsumerReport } from './consumers.js';

const dash = '-';
const show = (value: string | number | null | undefined): string =>
  value === null || value === undefined ? dash : String(value);

/** Groups the integer part of a decimal string in thousands: "1234567.5" -> "1,234,567.5". */
export function groupDecimal(decimal: string): string {
  const [whole = '0', fraction] = decimal.split('.');
  const grouped = whole.replace(/\B(?=(\d{3})+(?!\d))/g, ',');
  return fraction === undefined ? grouped : `${grouped}.${fraction}`;
}

export function formatStatus(report: ConsumerReport): string {
  const { position, head, lag } = headAndLag(report);
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
  rows.push(['position', `${show(position)}   head ${show(head)}   lag ${show(lag)}`]);
  rows.push([
    'generation',
    `${show(db?.state.generation ?? status?.committed?.generation)}   version ${show(db?.state.version ?? status?.committed?.version)}`,
  ]);
  if (db) {
    rows.push(['executions', `${db.executions}   markets ${db.markets}   volume ${groupDecimal(db.totalVolume)} USD`]);
    rows.push(['quarantine', `${db.heldQuarantine} held`]);
    rows.push(['outbox', `${db.pendingOutbox} pending`]);
    if (db.state.pendingStart) rows.push(['pending start', db.state.pendingStart]);
    if (db.state.abandoned) rows.push(['abandoned', 'yes']);
    const d = db.lastDecision;
    rows.push(['last decision', d ? `${d.kind} ${d.decision} by ${d.actor} at ${d.decidedAt}: ${d.reason}` : 'none']);
  } else {
    rows.push([
      'database',
      report.databaseError ?? 'not consulted (set DATABASE_URL to see effects, quarantine and decisions)',
    ]);
  }
  if (status) {
    const c = totalCounters(report) ?? status.counters;
    rows.push([
      'counters',
      `sessions ${c.sessions}   checkpoints ${c.checkpointsCommitted}   applied ${c.eventsApplied}   duplicates ${c.duplicates}   acks ${c.acksSent}`,
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
