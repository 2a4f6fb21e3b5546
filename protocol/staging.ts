// Bounded staging of one session's batches and quality notices until their checkpoint commits
// (docs/protocol.md §3 and §5). Pure: the clock is injected. Staged items are kept in journal order
// (position, ordinal) because the server delivers them that way and every frame is checked against the
// previous one; observedAt is carried, never used for ordering.
import { eventContentHash, tradeContentHash } from './canonical.js';
import { isSupportedKind, parseTradeData, type ServerFrameOf, type WireEvent } from './codec.js';
import { RepeatedStrings } from './repeated-strings.js';
import { ProtocolViolation } from './session-fence.js';
import type { Binding, CheckpointPlan, EventDelivery, QualityNotice, StagedEvent, StartMode } from './types.js';

export interface StagingLimits {
  maxEvents: number;
  maxBytes: number;
  maxAgeMs: number;
}

/**
 * A wire event at its journal position as staged: the stream's batches and the page source share this. A
 * supported kind must carry well-formed data (throws WireError naming the field); an unsupported kind is staged
 * for quarantine as is. `receivedAt`: when its frame or page arrived (epoch ms). `repeated`: where the trade's
 * repeating values (market, asset, wallet) share one instance each; the event's data, decoded for it alone, takes them.
 * `plainText`: every string of the event is ASCII that JSON writes as is (DecodedServerFrame.plainText).
 */
export function toStagedEvent(
  event: WireEvent,
  position: number,
  delivery: EventDelivery,
  receivedAt: number,
  repeated?: RepeatedStrings,
  plainText = false,
): StagedEvent {
  const trade = isSupportedKind(event.kind) ? parseTradeData(event.kind, event.data) : null;
  if (trade !== null && repeated !== undefined) {
    trade.market = repeated.share(trade.market);
    trade.asset = repeated.share(trade.asset);
    trade.wallet = repeated.share(trade.wallet);
  }
  return {
    position,
    ordinal: event.ordinal,
    eventId: event.eventId,
    kind: event.kind,
    entityId: event.entityId,
    revision: event.revision,
    observedAt: event.observedAt,
    data: event.data,
    trade,
    // Data the codec took as the trade itself is of the trade shape: its hash need not check that again.
    contentHash:
      trade !== null && trade === event.data
        ? tradeContentHash(event.kind, event.entityId, event.revision, trade, plainText)
        : eventContentHash(event),
    delivery,
    receivedAt,
  };
}

export type StagingBound = 'events' | 'bytes' | 'age';

/** Staging outgrew a bound: disconnect, discard staging and resume from the committed checkpoint. */
export class StagingBoundExceeded extends Error {
  override readonly name = 'StagingBoundExceeded';
  readonly code = 'staging_bound_exceeded' as const;
  constructor(
    readonly bound: StagingBound,
    readonly limit: number,
    readonly actual: number,
  ) {
    super(`staging bound exceeded: ${bound} ${actual} > limit ${limit}`);
  }
}

export interface StagingContext {
  binding: Binding;
  startMode: StartMode;
  /** Delivery covers positions above this (the subscribed frame's startPosition). */
  startPosition: number;
  cut: { position: number; snapshot: QualityNotice[] };
  limits: StagingLimits;
  now: () => number;
}

export type CheckpointCommitContext = Pick<CheckpointPlan, 'fence' | 'quarantinePolicy' | 'actions'>;

export class StagingBuffer {
  readonly #ctx: StagingContext;
  #events: StagedEvent[] = [];
  #notices: QualityNotice[] = [];
  #bytes = 0;
  #batches = 0;
  #oldestAt: number | null = null;
  /** Position of the last checkpoint handed to the commit (the start position before the first one). */
  #checkpointPosition: number;
  #lastBatchPosition: number | null = null;
  #lastItemPosition: number;
  #cutReached = false;
  readonly #repeated = new RepeatedStrings();

  constructor(ctx: StagingContext) {
    this.#ctx = ctx;
    this.#checkpointPosition = ctx.startPosition;
    this.#lastItemPosition = ctx.startPosition;
  }

  get generation(): number {
    return this.#ctx.binding.generation;
  }

  get size(): { events: number; bytes: number; batches: number; notices: number } {
    return { events: this.#events.length, bytes: this.#bytes, batches: this.#batches, notices: this.#notices.length };
  }

  get cutReached(): boolean {
    return this.#cutReached;
  }

  /**
   * Validates a batch and stages its events; throws ProtocolViolation, WireError or StagingBoundExceeded.
   * `wireBytes` and `plainText`: the size of the message it was decoded from and whether its strings are plain
   * (decodeServerFrame's), absent for a frame built in memory.
   */
  stageBatch(frame: ServerFrameOf<'batch'>, wireBytes?: number, plainText = false): void {
    this.#checkGeneration('batch', frame.generation);
    const floor = Math.max(this.#checkpointPosition, this.#lastBatchPosition ?? this.#checkpointPosition);
    if (frame.position <= floor) {
      throw new ProtocolViolation(
        'position_order',
        'batch',
        'position',
        `${frame.position} is not above the previous batch/checkpoint position ${floor}`,
      );
    }
    if (frame.position < this.#lastItemPosition) {
      throw new ProtocolViolation(
        'position_order',
        'batch',
        'position',
        `${frame.position} is below the last staged quality notice at ${this.#lastItemPosition}`,
      );
    }
    if (frame.events.length !== frame.matchedEventCount) {
      throw new ProtocolViolation(
        'event_count',
        'batch',
        'matchedEventCount',
        `${frame.matchedEventCount} but ${frame.events.length} events delivered`,
      );
    }
    if (frame.matchedEventCount > frame.sourceEventCount) {
      throw new ProtocolViolation(
        'event_count',
        'batch',
        'matchedEventCount',
        `${frame.matchedEventCount} exceeds sourceEventCount ${frame.sourceEventCount}`,
      );
    }
    // Staged straight into the buffer; a batch that fails validation or a bound is taken out again.
    const events = this.#events;
    const stagedBefore = events.length;
    const bytes = frame.events.length === 0 ? 0 : (wireBytes ?? jsonBytes(frame));
    const receivedAt = this.#ctx.now();
    try {
      let previousOrdinal = 0;
      for (let index = 0; index < frame.events.length; index++) {
        const event = frame.events[index]!;
        if (event.ordinal <= previousOrdinal || event.ordinal > frame.sourceEventCount) {
          throw new ProtocolViolation(
            'ordinal_order',
            'batch',
            `events.${index}.ordinal`,
            `${event.ordinal} must be above ${previousOrdinal} and at most sourceEventCount ${frame.sourceEventCount}`,
          );
        }
        previousOrdinal = event.ordinal;
        events.push(toStagedEvent(event, frame.position, frame.deliveryMode, receivedAt, this.#repeated, plainText));
      }
      this.#checkBounds(events.length, this.#bytes + bytes);
    } catch (error) {
      events.length = stagedBefore;
      throw error;
    }
    this.#bytes += bytes;
    this.#batches += 1;
    this.#lastBatchPosition = frame.position;
    this.#lastItemPosition = frame.position;
    this.#oldestAt ??= receivedAt;
  }

  /** Stages a quality notice at its journal position. */
  stageQuality(frame: ServerFrameOf<'quality'>): void {
    this.#checkGeneration('quality', frame.generation);
    if (frame.position <= this.#checkpointPosition || frame.position < this.#lastItemPosition) {
      throw new ProtocolViolation(
        'position_order',
        'quality',
        'position',
        `${frame.position} is behind the journal (checkpoint ${this.#checkpointPosition}, last staged ${this.#lastItemPosition})`,
      );
    }
    this.#checkBounds(this.#events.length, this.#bytes);
    this.#notices.push({ position: frame.position, scope: frame.scope, state: frame.state });
    this.#lastItemPosition = frame.position;
    this.#oldestAt ??= this.#ctx.now();
  }

  /** Throws StagingBoundExceeded when the oldest staged item has waited longer than maxAgeMs. */
  checkAge(): void {
    if (this.#oldestAt === null) return;
    const age = this.#ctx.now() - this.#oldestAt;
    if (age > this.#ctx.limits.maxAgeMs) throw new StagingBoundExceeded('age', this.#ctx.limits.maxAgeMs, age);
  }

  /**
   * Validates a checkpoint and hands everything staged since the previous one to the commit as a plan.
   * The buffer is cleared: if the commit fails the session is dropped and staging starts over anyway.
   */
  checkpoint(frame: ServerFrameOf<'checkpoint'>, commit: CheckpointCommitContext): CheckpointPlan {
    this.#checkGeneration('checkpoint', frame.generation);
    const floor = Math.max(this.#checkpointPosition, this.#lastItemPosition);
    if (frame.position < floor) {
      throw new ProtocolViolation(
        'position_order',
        'checkpoint',
        'position',
        `${frame.position} is below the last staged position ${floor}`,
      );
    }
    if (frame.batchCount !== this.#batches) {
      throw new ProtocolViolation(
        'batch_count',
        'checkpoint',
        'batchCount',
        `${frame.batchCount} but ${this.#batches} batches staged since the previous checkpoint`,
      );
    }
    this.checkAge();
    const reachesCut = !this.#cutReached && frame.position >= this.#ctx.cut.position;
    const notices = reachesCut ? mergeByPosition(this.#ctx.cut.snapshot, this.#notices) : this.#notices;
    const plan: CheckpointPlan = {
      consumerId: this.#ctx.binding.consumerId,
      fence: commit.fence,
      startMode: this.#ctx.startMode,
      binding: this.#ctx.binding,
      checkpoint: {
        position: frame.position,
        token: frame.token,
        generation: frame.generation,
        cutPosition: this.#ctx.cut.position,
        cutReached: this.#cutReached || reachesCut,
      },
      events: this.#events,
      qualityNotices: notices,
      quarantinePolicy: commit.quarantinePolicy,
      actions: commit.actions,
    };
    if (reachesCut) this.#cutReached = true;
    this.#checkpointPosition = frame.position;
    this.#lastItemPosition = frame.position;
    this.#lastBatchPosition = null;
    this.discard();
    return plan;
  }

  /** Drops everything not yet handed to a commit. */
  discard(): void {
    this.#events = [];
    this.#notices = [];
    this.#bytes = 0;
    this.#batches = 0;
    this.#oldestAt = null;
  }

  #checkGeneration(frameType: string, generation: number): void {
    if (generation !== this.#ctx.binding.generation) {
      throw new ProtocolViolation(
        'generation_mismatch',
        frameType,
        'generation',
        `${generation} is not the active generation ${this.#ctx.binding.generation}`,
      );
    }
  }

  #checkBounds(events: number, bytes: number): void {
    const { maxEvents, maxBytes } = this.#ctx.limits;
    if (events > maxEvents) throw new StagingBoundExceeded('events', maxEvents, events);
    if (bytes > maxBytes) throw new StagingBoundExceeded('bytes', maxBytes, bytes);
  }
}

/**
 * Size of a batch built in memory, as its JSON; a decoded one is counted at the message it came from, known
 * without serialising again. A bound on memory, not an exact wire size.
 */
function jsonBytes(frame: ServerFrameOf<'batch'>): number {
  return Buffer.byteLength(JSON.stringify(frame), 'utf8');
}

/** Stable merge by position: the snapshot's notice precedes a streamed one at the same position. */
function mergeByPosition(snapshot: QualityNotice[], streamed: QualityNotice[]): QualityNotice[] {
  return [...snapshot, ...streamed]
    .map((notice, index) => ({ notice, index }))
    .sort((a, b) => a.notice.position - b.notice.position || a.index - b.index)
    .map(({ notice }) => notice);
}
