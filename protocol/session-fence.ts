// Session epochs and frame-sequence checks (docs/protocol.md §1 and §2). Pure: no I/O, no timers.
// Every WebSocket connection is a new epoch; a callback that captured an older epoch must not change
// state or ACK, so each such callback checks `SessionFence.isActive` for its epoch first.

export type ProtocolViolationCode =
  | 'frame_sequence'
  | 'unexpected_frame'
  | 'hello_mismatch'
  | 'binding_mismatch'
  | 'generation_mismatch'
  | 'position_order'
  | 'event_count'
  | 'ordinal_order'
  | 'batch_count'
  | 'cut_mismatch';

/** The server broke the contract. Drop the connection, discard staging, resume from the committed checkpoint. */
export class ProtocolViolation extends Error {
  override readonly name = 'ProtocolViolation';
  constructor(
    readonly code: ProtocolViolationCode,
    readonly frameType: string,
    readonly field: string,
    readonly reason: string,
  ) {
    super(`protocol violation (${code}) in ${frameType} frame at ${field}: ${reason}`);
  }
}

export class SessionFence {
  #epoch = 0;
  #active = false;

  /** Starts a new session epoch; every older epoch is fenced from now on. */
  begin(): number {
    this.#epoch += 1;
    this.#active = true;
    return this.#epoch;
  }

  /** Ends the given epoch if it is still the active one (its socket closed); a newer epoch is untouched. */
  retire(epoch: number): void {
    if (this.isActive(epoch)) this.#active = false;
  }

  isActive(epoch: number): boolean {
    return this.#active && epoch === this.#epoch;
  }
}

/** frameSequence of one connection: 1 on hello, then +1 for every server frame, control frames included. */
export class FrameSequence {
  #last = 0;

  /** Throws ProtocolViolation on a gap, a repeat or a regression; the first frame must be hello with 1. */
  accept(frame: { type: string; frameSequence: number }): void {
    const expected = this.#last + 1;
    if (frame.frameSequence !== expected) {
      const kind =
        frame.frameSequence <= this.#last ? (frame.frameSequence === this.#last ? 'repeat' : 'regression') : 'gap';
      throw new ProtocolViolation(
        'frame_sequence',
        frame.type,
        'frameSequence',
        `${kind}: expected ${expected}, got ${frame.frameSequence}`,
      );
    }
    if (expected === 1 && frame.type !== 'hello') {
      throw new ProtocolViolation(
        'unexpected_frame',
        frame.type,
        'type',
        'the first frame of a connection must be hello',
      );
    }
    if (expected !== 1 && frame.type === 'hello') {
      throw new ProtocolViolation(
        'unexpected_frame',
        frame.type,
        'type',
        'hello may only be the first frame of a connection',
      );
    }
    this.#last = frame.frameSequence;
  }
}
