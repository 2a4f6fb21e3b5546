// The answers of a commit other than "committed", shared by the stream's checkpoints and the page consumer's
// chunks: both return them (never throw them), and their callers switch on `kind`.
import type { QuarantineReason } from '../protocol/types.js';

/** Same eventId, different content: the whole plan is refused and nothing is written. */
export interface CommitConflict {
  kind: 'conflict';
  eventId: string;
  savedHash: string;
  incomingHash: string;
}

/** An event the reducer cannot apply, recorded as held until an operator decides. */
export interface HeldQuarantineItem {
  eventId: string;
  entityId: string;
  kind: string;
  position: number;
  reason: QuarantineReason;
}

/** Only the held records were written (every held event of the plan); no effect, no progress. */
export interface CommitHeld {
  kind: 'held_quarantine';
  items: HeldQuarantineItem[];
}

/** The held records of a plan as the operator sees them (what the decision covers). */
export function commitHeld(held: readonly HeldQuarantineItem[]): CommitHeld {
  return {
    kind: 'held_quarantine',
    items: held.map(({ eventId, entityId, kind, position, reason }) => ({ eventId, entityId, kind, position, reason })),
  };
}

export function describeConflict(conflict: CommitConflict): string {
  return (
    `event ${conflict.eventId} conflicts with its saved receipt: saved content ${conflict.savedHash}, ` +
    `incoming ${conflict.incomingHash}`
  );
}

/** Exhaustiveness check for a switch over outcome kinds. */
export function unreachable(value: never): never {
  throw new Error(`unhandled outcome ${JSON.stringify(value)}`);
}
