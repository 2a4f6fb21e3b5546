// What the backfill e2e files share: how a backfill's handover shows in its workflow history (the record that it
// happened, and how many times), and counts over the reference journal.
import type { WorkflowHandle } from '@temporalio/client';
import type { Journal } from '../../simulator/journal.js';

export interface HandoverRecord {
  /** handOverToStream activities the workflow scheduled (a retried attempt is the same activity). */
  scheduled: number;
  /** The attempt that completed, per completed handover activity. */
  completedAttempts: number[];
  /** The handover activities' results, in order. */
  results: { kind: string; appliedPosition?: number }[];
  /** Child workflows started (the live stream consumer). */
  childStarts: string[];
}

/** Reads the backfill's history: the handover activity, its attempts and results, and the child it started. */
export async function handoverRecord(handle: WorkflowHandle): Promise<HandoverRecord> {
  const history = await handle.fetchHistory();
  const events = history.events ?? [];
  const handoverIds = new Set<string>();
  const record: HandoverRecord = { scheduled: 0, completedAttempts: [], results: [], childStarts: [] };
  const attemptOf = new Map<string, number>();
  for (const event of events) {
    const id = String(event.eventId);
    const scheduled = event.activityTaskScheduledEventAttributes;
    if (scheduled?.activityType?.name === 'handOverToStream') {
      handoverIds.add(id);
      record.scheduled += 1;
    }
    const started = event.activityTaskStartedEventAttributes;
    if (started && handoverIds.has(String(started.scheduledEventId))) attemptOf.set(id, started.attempt ?? 1);
    const completed = event.activityTaskCompletedEventAttributes;
    if (completed && handoverIds.has(String(completed.scheduledEventId))) {
      record.completedAttempts.push(attemptOf.get(String(completed.startedEventId)) ?? 0);
      const data = completed.result?.payloads?.[0]?.data;
      if (data) record.results.push(JSON.parse(Buffer.from(data).toString('utf8')) as HandoverRecord['results'][0]);
    }
    const child = event.startChildWorkflowExecutionInitiatedEventAttributes;
    if (child?.workflowId) record.childStarts.push(child.workflowId);
  }
  return record;
}

/** Distinct eventIds the journal holds: what a complete consumer has one receipt each for. */
export function distinctEventIds(journal: Journal): number {
  const ids = new Set<string>();
  for (let i = 0, t = journal.at(0); t; t = journal.at(++i)) for (const event of t.events) ids.add(event.eventId);
  return ids.size;
}

/** Events at positions up to `position`. */
export function eventsThrough(journal: Journal, position: number): number {
  let n = 0;
  for (let i = 0, t = journal.at(0); t && t.position <= position; t = journal.at(++i)) n += t.events.length;
  return n;
}
