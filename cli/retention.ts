// What `status` shows of retention (docs/design.md#retention): the consumer tables' sizes and the last maintenance
// run, read from the database.
import type pg from 'pg';
import { lastMaintenanceRun, tableSizes, type MaintenanceRunRow, type TableSize } from '../db/index.js';
import { formatCount } from '../protocol/progress.js';

export interface RetentionView {
  tables: TableSize[];
  lastRun: MaintenanceRunRow | null;
}

/** The consumer tables' sizes and the last maintenance run, from the catalogue and maintenance_runs. */
export async function retentionView(pool: pg.Pool): Promise<RetentionView> {
  const [tables, lastRun] = await Promise.all([tableSizes(pool), lastMaintenanceRun(pool)]);
  return { tables, lastRun };
}

/** `status` rows: the last maintenance run, and the tables by size on disk (indexes included). */
export function retentionRows(view: RetentionView): [string, string][] {
  const run = view.lastRun;
  const last = run
    ? `${run.status} ${run.finishedAt ?? `(started ${run.startedAt})`}: removed ${formatCount(run.receiptsDeleted)} receipts, ${formatCount(run.outboxDeleted)} outbox rows, ${formatCount(run.revisionsDeleted)} revisions${run.error ? `; ${run.error}` : ''}`
    : 'none yet (whalehunt-consumer maintenance runs one now)';
  const tables = [...view.tables]
    .sort((a, b) => b.tableBytes + b.indexBytes - (a.tableBytes + a.indexBytes))
    .map((t) => `${t.table} ${formatBytes(t.tableBytes + t.indexBytes)}`)
    .join(', ');
  return [
    ['maintenance', last],
    ['tables', tables === '' ? '-' : `${tables} (with indexes)`],
  ];
}

function formatBytes(bytes: number): string {
  const units = ['B', 'kB', 'MB', 'GB', 'TB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${unit === 0 ? value : value.toFixed(1)} ${units[unit]}`;
}
