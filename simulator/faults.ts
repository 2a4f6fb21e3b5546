// Deliberate breaches of the contract, and the decisions that fire them. The stream connections and the page
// endpoint ask here whether a fault applies now; a one-shot fault is cleared as it fires, a recurring one stays
// armed until a test (or the operator of a standalone simulator) removes it from `server.faults`.
import type { JournalEvent } from './journal-types.js';

export type FrameSequenceFaultMode = 'duplicate' | 'skip' | 'reorder';

export interface FrameSequenceFault {
  mode: FrameSequenceFaultMode;
  /** The frame of a connection (1 = hello) whose frameSequence breaks. */
  atFrame: number;
  /** Fire on every connection that reaches `atFrame`, not only the next one (cleared only when removed). */
  everySession?: boolean;
}

export interface PageOverlapFault {
  /** How many earlier transitions with matched events the page re-includes before its own events. */
  transitions: number;
  /**
   * Leave out the events at the cursor's own position (the reader applied them already) and re-include the
   * `transitions` before it: cursor at 105 gives 104, then 106, 107... (docs/protocol.md §7).
   */
  omitCursorPosition: boolean;
}

/**
 * Deliberate breaches of the contract. Each entry is one-shot (cleared when it fires) unless noted;
 * tests arm and remove them through `server.faults` at any time, `main.ts` arms them from CLI flags.
 */
export interface FaultPlan {
  /** Terminate the first connection that has sent this many frames (no close frame: a network failure). */
  dropAfterFrames?: number;
  /** Terminate a connection right after the frames of the first transition at or above this position. */
  dropAtPosition?: number;
  /** Corrupt frameSequence at the N-th frame of the next connection that reaches it (of every one: everySession). */
  frameSequence?: FrameSequenceFault;
  /** The next `count` otherwise valid ACKs are refused (error frame, then close) or lost (silently ignored). */
  ack?: { mode: 'refuse' | 'lose'; count: number };
  /** The next `count` subscribes get `error overloaded`. */
  overloadSubscribes?: { count: number; retryAfterMs: number };
  /** Recurring: every subscribe gets `error overloaded` (retryable, with retryAfterMs) until this is removed. */
  overloadEverySubscribe?: { retryAfterMs: number };
  /** Recurring: every `caught_up` carries its cut as a bare number instead of `{position}` (a malformed frame). */
  malformedCaughtUp?: boolean;
  /** Persistent: an old connection of the same consumer+subscription keeps delivering after a new one subscribes. */
  drainOldConnections?: boolean;
  /** The first batch at or above this position reuses the eventId of an earlier delivered event (a conflict). */
  conflictingEventAt?: number;
  /**
   * The first batch at or above this position carries an event of an unknown kind; from then on every delivery of
   * that event does (`unknownKindEventId`), as if the journal held it so. A consumer commits what it received only at
   * a checkpoint and a connection may end before that one (an explicit start ends at its first commit): a one-shot
   * kind would be replayed as its true kind on the next connection, and no quarantine would ever show.
   */
  unknownKindAt?: number;
  /** Persistent, set when `unknownKindAt` fires: the event every delivery carries with an unknown kind. */
  unknownKindEventId?: string;
  /** The first batch at or above this position is padded beyond maxFrameBytes. */
  oversizeFrameAt?: number;
  /** The next page re-includes the events of this many transitions before its cursor (or as described). */
  pageOverlap?: number | PageOverlapFault;
  /** The next page (with 'every_page': every page until removed) answers `next` equal to its request cursor. */
  pageNonAdvancing?: boolean | 'every_page';
  /** The next page request answers 410 cursor_expired whatever its cursor. */
  pageExpired?: boolean;
  /**
   * Persistent: a page scans at most this many transitions (default 5000), so a filter that matches none of
   * them answers a zero-item page whose `next` still advances.
   */
  pageScanLimit?: number;
}

/** The `retryAfterMs` of an `overloaded` answer when this subscribe is to be refused, else undefined. */
export function takeSubscribeOverload(faults: FaultPlan): number | undefined {
  if (faults.overloadEverySubscribe) return faults.overloadEverySubscribe.retryAfterMs;
  const once = faults.overloadSubscribes;
  if (!once || once.count <= 0) return undefined;
  once.count -= 1;
  if (once.count === 0) faults.overloadSubscribes = undefined;
  return once.retryAfterMs;
}

/** How the `frame`-th frame of a connection (1 = hello) breaks the sequence, if it does. */
export function takeFrameSequenceFault(faults: FaultPlan, frame: number): FrameSequenceFaultMode | undefined {
  const fault = faults.frameSequence;
  if (!fault || fault.atFrame !== frame) return undefined;
  if (!fault.everySession) faults.frameSequence = undefined;
  return fault.mode;
}

/** What happens to an otherwise valid ACK: refused, lost, or (undefined) accepted. */
export function takeAckFault(faults: FaultPlan): 'refuse' | 'lose' | undefined {
  const fault = faults.ack;
  if (!fault || fault.count <= 0) return undefined;
  fault.count -= 1;
  if (fault.count === 0) faults.ack = undefined;
  return fault.mode;
}

/** True when the connection is to fail right after the frames of the transition at `position`. */
export function takeDropAtPosition(faults: FaultPlan, position: number): boolean {
  if (faults.dropAtPosition === undefined || position < faults.dropAtPosition) return false;
  faults.dropAtPosition = undefined;
  return true;
}

/** True when a connection that has sent `framesSent` frames is to fail now. */
export function takeDropAfterFrames(faults: FaultPlan, framesSent: number): boolean {
  if (faults.dropAfterFrames === undefined || framesSent < faults.dropAfterFrames) return false;
  faults.dropAfterFrames = undefined;
  return true;
}

/** The `cut` field of a caught_up frame: `{position}`, or a bare number while `malformedCaughtUp` is armed. */
export function caughtUpCut(faults: FaultPlan, position: number): { position: number } {
  // The malformed shape is what a broken server would send; the frame type cannot express it.
  return faults.malformedCaughtUp ? (position as unknown as { position: number }) : { position };
}

/** A kind the consumer does not support: quarantined at the commit (docs/protocol.md §5). */
const UNKNOWN_KIND = 'market_resolution';

/**
 * The events of the batch at `position` after any armed event fault: a conflicting eventId (taken from
 * `earlierMatchedEvent`, the nearest earlier event the connection delivered), an unknown kind, or padding
 * beyond `maxFrameBytes`.
 */
export function applyEventFaults(
  faults: FaultPlan,
  position: number,
  events: JournalEvent[],
  context: { earlierMatchedEvent: () => JournalEvent | undefined; maxFrameBytes: number },
): JournalEvent[] {
  if (faults.unknownKindEventId !== undefined) {
    const unknown = faults.unknownKindEventId;
    events = events.map((event) => (event.eventId === unknown ? { ...event, kind: UNKNOWN_KIND } : event));
  }
  const [first, ...rest] = events as [JournalEvent, ...JournalEvent[]];
  if (faults.conflictingEventAt !== undefined && position >= faults.conflictingEventAt) {
    const earlier = context.earlierMatchedEvent();
    if (earlier) {
      faults.conflictingEventAt = undefined;
      return [{ ...first, eventId: earlier.eventId }, ...rest];
    }
  }
  if (faults.unknownKindAt !== undefined && position >= faults.unknownKindAt) {
    faults.unknownKindAt = undefined;
    faults.unknownKindEventId = first.eventId;
    return [{ ...first, kind: UNKNOWN_KIND }, ...rest];
  }
  if (faults.oversizeFrameAt !== undefined && position >= faults.oversizeFrameAt) {
    faults.oversizeFrameAt = undefined;
    return [{ ...first, data: { ...first.data, padding: 'x'.repeat(context.maxFrameBytes) } }, ...rest];
  }
  return events;
}

/** True when the next page is to answer 410 cursor_expired. */
export function takePageExpired(faults: FaultPlan): boolean {
  if (!faults.pageExpired) return false;
  faults.pageExpired = undefined;
  return true;
}

/** The overlap the next page is to re-include, if armed. */
export function takePageOverlap(faults: FaultPlan): PageOverlapFault | undefined {
  const fault = faults.pageOverlap;
  if (!fault) return undefined;
  faults.pageOverlap = undefined;
  return typeof fault === 'number' ? { transitions: fault, omitCursorPosition: false } : fault;
}

/** True when this page is to answer its request cursor as `next`. */
export function takePageNonAdvancing(faults: FaultPlan): boolean {
  if (!faults.pageNonAdvancing) return false;
  if (faults.pageNonAdvancing !== 'every_page') faults.pageNonAdvancing = undefined;
  return true;
}
