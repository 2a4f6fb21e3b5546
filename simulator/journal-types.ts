// What the reference server's journal holds and is given: transitions of source events and quality changes, and
// the error its operations refuse with. Shared by the journal (journal.ts), its generator and its file format.
import type { QualityState } from '../protocol/codec.js';

export interface JournalEvent {
  ordinal: number;
  eventId: string;
  kind: string;
  entityId: string;
  revision: number;
  observedAt: string;
  data: Record<string, unknown>;
}

export interface QualityChange {
  scope: string;
  state: QualityState;
}

export interface Transition {
  position: number;
  events: JournalEvent[];
  quality: QualityChange[];
}

/** An event to append; the journal assigns the ordinal and, when absent, the eventId. */
export type NewEvent = Omit<JournalEvent, 'ordinal' | 'eventId'> & { eventId?: string };
export interface NewTransition {
  events: NewEvent[];
  quality?: QualityChange[];
}

export class JournalError extends Error {
  override readonly name = 'JournalError';
  constructor(
    readonly code:
      | 'invalid_journal_file'
      | 'empty_transition'
      | 'invalid_floor'
      | 'invalid_shift'
      | 'position_not_increasing'
      | 'duplicate_event_id'
      | 'unknown_event_id',
    message: string,
  ) {
    super(message);
  }
}
