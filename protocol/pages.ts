// Pure logic of the paginated history source (docs/protocol.md §8): what a page is (advancing, zero-item,
// non-advancing), which of its events are already inside the durable prefix, how the rest is cut into chunks
// that each end on a whole journal position.
import type { PageEvent, PageResponse } from './codec.js';
import { toStagedEvent } from './staging.js';
import type { StagedEvent } from './types.js';

/**
 * - `advancing`: `next` differs from the request cursor; its events (maybe none: a zero-item page) get durable
 *   outcomes, then `next` replaces the cursor.
 * - `non_advancing`: `next` equals the request cursor. Nothing of it is applied; the reader backs off and asks
 *   again, and stops after a bounded number of attempts. `nothingNew` (no event above the applied position):
 *   at the head of the journal this is how the source says "caught up", overlapping events or not.
 */
export type PageKind = { kind: 'advancing'; zeroItem: boolean } | { kind: 'non_advancing'; nothingNew: boolean };

export function classifyPage(
  requestCursor: string | null,
  page: Pick<PageResponse, 'next' | 'events'>,
  appliedPosition: number,
): PageKind {
  if (requestCursor !== null && page.next === requestCursor) {
    return { kind: 'non_advancing', nothingNew: page.events.every((e) => e.position <= appliedPosition) };
  }
  return { kind: 'advancing', zeroItem: page.events.length === 0 };
}

/** The page's events as staged events (content hash over the canonical event), received at `receivedAt`. */
export function stagePageEvents(events: readonly PageEvent[], receivedAt: number): StagedEvent[] {
  return events.map((event) => toStagedEvent(event, event.position, 'backfill', receivedAt));
}

/** The first break of journal order (position, ordinal strictly increasing), or null: for a page and a plan. */
export function journalOrderProblem(events: readonly StagedEvent[]): string | null {
  for (let i = 1; i < events.length; i++) {
    const before = events[i - 1]!;
    const event = events[i]!;
    if (event.position < before.position || (event.position === before.position && event.ordinal <= before.ordinal)) {
      return `event ${event.eventId} at ${event.position}/${event.ordinal} follows ${before.eventId} at ${before.position}/${before.ordinal}`;
    }
  }
  return null;
}

/**
 * Events at or below the applied position are inside the complete durable prefix: they must be recognised by
 * their receipts (an overlapping page), never reapplied. The rest is fresh.
 */
export function splitAtApplied(
  events: readonly StagedEvent[],
  appliedPosition: number,
): { recognised: StagedEvent[]; fresh: StagedEvent[] } {
  const recognised: StagedEvent[] = [];
  const fresh: StagedEvent[] = [];
  for (const event of events) (event.position <= appliedPosition ? recognised : fresh).push(event);
  return { recognised, fresh };
}

/**
 * Cuts journal-ordered events into chunks of about `chunkSize` events that each end on a whole position: a
 * chunk's commit moves applied_position to its last position, which claims every event at that position. A
 * position holding more than `chunkSize` events is one chunk of its own.
 */
export function chunkByPosition(events: readonly StagedEvent[], chunkSize: number): StagedEvent[][] {
  if (!Number.isSafeInteger(chunkSize) || chunkSize < 1)
    throw new RangeError(`chunk size ${chunkSize} is not a positive integer`);
  const chunks: StagedEvent[][] = [];
  let chunk: StagedEvent[] = [];
  for (let i = 0; i < events.length; i++) {
    const event = events[i]!;
    chunk.push(event);
    const positionEnds = events[i + 1]?.position !== event.position;
    if (positionEnds && chunk.length >= chunkSize) {
      chunks.push(chunk);
      chunk = [];
    }
  }
  if (chunk.length > 0) chunks.push(chunk);
  return chunks;
}
