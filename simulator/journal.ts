// The append-only journal behind the reference server: transitions at strictly increasing positions, each with
// 1..n source events and optional quality changes, generated from a seed (journal-generator.ts) so that every test
// and benchmark can rebuild the exact same stream, appended to live, or loaded from a file (journal-format.ts).
// Generated transitions are not kept: the journal keeps the generator's state at the start of each run of
// `runLength` generated transitions and regenerates a run when it is read (the `cachedRuns` most recently read
// ones kept), so memory is bounded by the cache, not by the journal's length: small at hundreds of thousands of
// transitions and under long live appends. Only transitions that were not generated here (explicit appends,
// redeliveries, a loaded file) are stored.
import { canonicalJson } from '../protocol/canonical.js';
import type { History, Mappings, QualityScope } from '../protocol/codec.js';
import { isoTimestamp } from './iso-timestamp.js';
import { readJournalFile, writeJournalFile } from './journal-format.js';
import {
  ActivityGenerator,
  buildUniverse,
  DEFAULT_ACTIVITY,
  DEFAULT_SCOPES,
  DEFAULT_START_TIME,
  eventIdOf,
  generatedContent,
  type GeneratorState,
  type TransitionContent,
  type UniverseSize,
} from './journal-generator.js';
import {
  JournalError,
  type JournalEvent,
  type NewTransition,
  type QualityChange,
  type Transition,
} from './journal-types.js';

export interface GeneratorOptions {
  seed: number;
  /** Transitions generated up front. */
  transitions: number;
  markets?: number;
  whales?: number;
  smallWallets?: number;
  /** Probability that an event corrects an earlier trade (0..1). */
  correctionRate?: number;
  /** Probability that a transition carries a quality change (0..1). */
  qualityRate?: number;
  maxEventsPerTransition?: number;
  /** observedAt of the first transition. */
  startTime?: string;
  /** Memory against CPU (see DEFAULT_RUN_LENGTH, DEFAULT_CACHED_RUNS). */
  runLength?: number;
  cachedRuns?: number;
}

export type AppendListener = (transition: Transition) => void;

interface QualityLogEntry extends QualityChange {
  position: number;
}

/**
 * Generated transitions per run: what one regeneration costs at most, and how often the generator's state
 * (its 512-trade correction window, ~250 KB) is saved.
 */
export const DEFAULT_RUN_LENGTH = 4096;
/**
 * Runs kept materialised (most recently read): a journal of up to runLength × cachedRuns transitions is
 * generated once and never again; a longer one is regenerated run by run as readers move through it.
 */
export const DEFAULT_CACHED_RUNS = 8;

/** A run of generated transitions: the generator's state and the event sequence before its first one. */
interface GeneratedRun {
  state: GeneratorState;
  firstEventSeq: number;
  lastEventSeq: number;
  count: number;
}

/**
 * Retained transitions at contiguous or increasing positions: a slice of a generated run (regenerated when
 * read) or transitions stored as they are. `firstIndex` is the segment's index among retained transitions.
 */
type Segment =
  | { kind: 'generated'; run: GeneratedRun; from: number; count: number; firstPosition: number; firstIndex: number }
  | { kind: 'stored'; transitions: Transition[]; firstIndex: number };

const segmentLength = (segment: Segment): number =>
  segment.kind === 'generated' ? segment.count : segment.transitions.length;
const firstPositionOf = (segment: Segment): number =>
  segment.kind === 'generated' ? segment.firstPosition : (segment.transitions[0] as Transition).position;
const lastPositionOf = (segment: Segment): number =>
  segment.kind === 'generated'
    ? segment.firstPosition + segment.count - 1
    : (segment.transitions.at(-1) as Transition).position;

export class Journal {
  private segments: Segment[] = [];
  /** Every generated run, retained or not, in event-sequence order: eventIds stay resolvable. */
  private readonly runs: GeneratedRun[] = [];
  private readonly cache = new Map<GeneratedRun, TransitionContent[]>();
  private qualityLog: QualityLogEntry[] = [];
  /**
   * Every stored (not generated) event ever appended, by eventId: retention does not forget them, since a
   * redelivery may repeat one. Generated events are found through their run.
   */
  private readonly storedEventsById = new Map<string, JournalEvent>();
  private readonly appendListeners = new Set<AppendListener>();
  private readonly rebuildListeners = new Set<() => void>();
  private headPosition = 0;
  private eventSeq = 0;
  private rebuilds = 0;
  private liveTimer: NodeJS.Timeout | undefined;
  private generator: ActivityGenerator;
  private historyIdValue: string;
  private floorValue = 1;
  private runLength = DEFAULT_RUN_LENGTH;
  private cachedRuns = DEFAULT_CACHED_RUNS;
  readonly mappings: Mappings;
  readonly scopes: readonly string[];

  private constructor(
    readonly seed: number,
    private readonly universeSize: UniverseSize,
    settings: {
      correctionRate: number;
      qualityRate: number;
      maxEventsPerTransition: number;
      scopes: readonly string[];
      startMs: number;
      historyId: string;
    },
  ) {
    const universe = buildUniverse({ seed, ...universeSize });
    this.mappings = universe.mappings;
    this.scopes = settings.scopes;
    this.historyIdValue = settings.historyId;
    this.generator = new ActivityGenerator(universe, seed, settings, settings.startMs);
  }

  /** A journal generated from a seed: the same options always give the same journal. */
  static generate(opts: GeneratorOptions): Journal {
    const journal = new Journal(
      opts.seed,
      { markets: opts.markets ?? 12, whales: opts.whales ?? 5, smallWallets: opts.smallWallets ?? 200 },
      {
        correctionRate: opts.correctionRate ?? DEFAULT_ACTIVITY.correctionRate,
        qualityRate: opts.qualityRate ?? DEFAULT_ACTIVITY.qualityRate,
        maxEventsPerTransition: opts.maxEventsPerTransition ?? DEFAULT_ACTIVITY.maxEventsPerTransition,
        scopes: DEFAULT_SCOPES,
        startMs: Date.parse(opts.startTime ?? DEFAULT_START_TIME),
        historyId: `hist-${(opts.seed >>> 0).toString(16)}`,
      },
    );
    journal.runLength = opts.runLength ?? DEFAULT_RUN_LENGTH;
    journal.cachedRuns = opts.cachedRuns ?? DEFAULT_CACHED_RUNS;
    for (let i = 0; i < opts.transitions; i++) journal.appendGenerated();
    return journal;
  }

  /** Reads a journal written by `save`. Live generation continues from the loaded content. */
  static async load(file: string): Promise<Journal> {
    const { header, transitions } = await readJournalFile(file);
    const journal = new Journal(header.seed, header.universe, {
      ...DEFAULT_ACTIVITY,
      scopes: header.scopes,
      startMs: 0,
      historyId: header.historyId,
    });
    journal.floorValue = header.floor;
    for await (const transition of transitions) journal.insert(transition, { redelivery: true });
    // Live appends continue deterministically from where the file ends.
    journal.generator = journal.reseededGenerator();
    for (const t of journal.range(0, journal.head)) for (const e of t.events) journal.generator.remember(e);
    journal.floorValue = Math.max(journal.floorValue, 1);
    return journal;
  }

  /** Writes the header and every retained transition, a line each, streaming (the journal may be large). */
  async save(file: string): Promise<void> {
    const header = {
      historyId: this.historyIdValue,
      floor: this.floorValue,
      seed: this.seed,
      scopes: this.scopes,
      universe: this.universeSize,
    };
    await writeJournalFile(file, header, this.range(0, this.headPosition));
  }

  get historyId(): string {
    return this.historyIdValue;
  }
  /** The lowest retained position. */
  get floor(): number {
    return this.floorValue;
  }
  get head(): number {
    return this.headPosition;
  }
  get history(): History {
    return { id: this.historyIdValue, floor: this.floorValue, head: this.headPosition };
  }
  /** Retained transitions. */
  get size(): number {
    const last = this.segments.at(-1);
    return last ? last.firstIndex + segmentLength(last) : 0;
  }

  /**
   * Transitions held in memory right now (stored ones and the cached runs): what stays small for a large
   * generated journal. For tests and the journal bench.
   */
  get residentTransitions(): number {
    let n = 0;
    for (const segment of this.segments) if (segment.kind === 'stored') n += segment.transitions.length;
    for (const run of this.cache.values()) n += run.length;
    return n;
  }

  /** Appends one transition at head + 1 and tells live listeners. */
  append(input: NewTransition): Transition {
    if (input.events.length === 0)
      throw new JournalError('empty_transition', 'a transition holds at least one source event');
    const position = this.headPosition + 1;
    const events = input.events.map((e, i): JournalEvent => {
      const eventId = e.eventId ?? this.nextEventId();
      // Fields in the order docs/protocol.md lists them, as a consumer's decoder expects them first.
      return {
        ordinal: i + 1,
        eventId,
        kind: e.kind,
        entityId: e.entityId,
        revision: e.revision,
        observedAt: e.observedAt,
        data: e.data,
      };
    });
    return this.publish({ position, events, quality: input.quality ?? [] }, { redelivery: false });
  }

  /**
   * Appends at head + 1 a transition that repeats events already in the journal verbatim (an overlapping
   * redelivery): the same eventId, kind, entityId, revision, data and observedAt at a new position and ordinal.
   * A consumer must recognise them as duplicates: content identity excludes where an event was delivered.
   */
  redeliver(eventIds: readonly string[], opts: { quality?: QualityChange[] } = {}): Transition {
    if (eventIds.length === 0)
      throw new JournalError('empty_transition', 'a transition holds at least one source event');
    const events = eventIds.map((eventId, i): JournalEvent => {
      const earlier = this.eventById(eventId);
      if (!earlier) throw new JournalError('unknown_event_id', `eventId ${eventId} is not in the journal`);
      return { ...earlier, ordinal: i + 1 };
    });
    return this.publish({ position: this.headPosition + 1, events, quality: opts.quality ?? [] }, { redelivery: true });
  }

  private publish(transition: Transition, opts: { redelivery: boolean }): Transition {
    this.insert(transition, opts);
    for (const listener of this.appendListeners) listener(transition);
    return transition;
  }

  /** Appends the generator's next transition; it is kept as part of a run, not stored. */
  appendGenerated(): Transition {
    const last = this.segments.at(-1);
    const open =
      last?.kind === 'generated' &&
      last.from + last.count === last.run.count &&
      last.run.count < this.runLength &&
      last.run.lastEventSeq === this.eventSeq
        ? last
        : undefined;
    const run: GeneratedRun = open?.run ?? {
      state: this.generator.snapshot(),
      firstEventSeq: this.eventSeq,
      lastEventSeq: this.eventSeq,
      count: 0,
    };
    const content = generatedContent(this.generator.next(), this.eventSeq, this.seed);
    const transition: Transition = { position: this.headPosition + 1, ...content };
    this.eventSeq += content.events.length;
    for (const q of transition.quality) this.qualityLog.push({ ...q, position: transition.position });
    this.headPosition = transition.position;
    run.count += 1;
    run.lastEventSeq = this.eventSeq;
    this.cache.get(run)?.push(content);
    if (open) open.count += 1;
    else {
      this.runs.push(run);
      this.segments.push({
        kind: 'generated',
        run,
        from: 0,
        count: 1,
        firstPosition: transition.position,
        firstIndex: this.size,
      });
    }
    for (const listener of this.appendListeners) listener(transition);
    return transition;
  }

  /**
   * Appends the generator's next transition as a live source would: observed just now (up to a second ago), not
   * on the journal's synthetic clock. Stored, like any explicit append.
   */
  appendLive(now = Date.now()): Transition {
    const { events, quality } = this.generator.next();
    return this.append({
      events: events.map((event, i) => ({ ...event, observedAt: isoTimestamp(now - ((i * 137) % 1000)) })),
      quality,
    });
  }

  /** Appends `perSecond` live transitions (appendLive) per second until stopped (or the server closes). */
  startLiveAppends(perSecond: number): void {
    this.stopLiveAppends();
    if (perSecond <= 0) return;
    this.liveTimer = setInterval(() => this.appendLive(), Math.max(1, Math.round(1000 / perSecond)));
    this.liveTimer.unref();
  }

  stopLiveAppends(): void {
    if (this.liveTimer) clearInterval(this.liveTimer);
    this.liveTimer = undefined;
  }

  onAppend(listener: AppendListener): () => void {
    this.appendListeners.add(listener);
    return () => this.appendListeners.delete(listener);
  }

  onRebuild(listener: () => void): () => void {
    this.rebuildListeners.add(listener);
    return () => this.rebuildListeners.delete(listener);
  }

  /** Drops every transition below `position`; tokens before it can no longer be served. */
  setRetentionFloor(position: number): void {
    if (!Number.isInteger(position) || position < this.floorValue || position > this.headPosition + 1) {
      throw new JournalError(
        'invalid_floor',
        `retention floor must be within ${this.floorValue}..${this.headPosition + 1}, got ${position}`,
      );
    }
    this.floorValue = position;
    const kept: Segment[] = [];
    for (const segment of this.segments) {
      if (lastPositionOf(segment) < position) continue;
      if (firstPositionOf(segment) >= position) kept.push(segment);
      else if (segment.kind === 'generated') {
        const skip = position - segment.firstPosition;
        kept.push({ ...segment, from: segment.from + skip, count: segment.count - skip, firstPosition: position });
      } else {
        kept.push({ ...segment, transitions: segment.transitions.filter((t) => t.position >= position) });
      }
    }
    this.segments = kept;
    this.reindex();
  }

  /**
   * A new history: new id, the retained transitions renumbered from 1 + `shift` (positions 1..shift hold
   * nothing), floor 1. Every token of the old history is void; the events keep their eventIds and content, so
   * a consumer that replays the new history (an operator's `from_floor`) meets them again at new positions:
   * duplicates, not conflicts.
   */
  rebuildHistory(opts: { shift?: number } = {}): void {
    const shift = opts.shift ?? 0;
    if (!Number.isInteger(shift) || shift < 0)
      throw new JournalError('invalid_shift', `a rebuild shift is a non-negative integer, got ${shift}`);
    this.rebuilds += 1;
    this.historyIdValue = `${this.historyIdValue.replace(/-r\d+$/, '')}-r${this.rebuilds}`;
    // A retained position moves to shift + its index + 1; a quality change below the floor goes.
    this.qualityLog = this.qualityLog.flatMap((q) => {
      const index = this.indexAfter(q.position - 1);
      return this.positionAtIndex(index) === q.position ? [{ ...q, position: shift + index + 1 }] : [];
    });
    this.segments = this.segments.map((segment): Segment => {
      const first = shift + segment.firstIndex + 1;
      return segment.kind === 'generated'
        ? { ...segment, firstPosition: first }
        : { ...segment, transitions: segment.transitions.map((t, i) => ({ ...t, position: first + i })) };
    });
    this.headPosition = shift + this.size;
    this.floorValue = 1;
    for (const listener of this.rebuildListeners) listener();
  }

  /** Index of the first retained transition with position > `position` (binary search). */
  indexAfter(position: number): number {
    let lo = 0;
    let hi = this.segments.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (lastPositionOf(this.segments[mid] as Segment) <= position) lo = mid + 1;
      else hi = mid;
    }
    const segment = this.segments[lo];
    if (!segment) return this.size;
    if (segment.kind === 'generated') return segment.firstIndex + Math.max(0, position + 1 - segment.firstPosition);
    let l = 0;
    let h = segment.transitions.length;
    while (l < h) {
      const mid = (l + h) >>> 1;
      if ((segment.transitions[mid] as Transition).position <= position) l = mid + 1;
      else h = mid;
    }
    return segment.firstIndex + l;
  }

  at(index: number): Transition | undefined {
    const segment = this.segmentAt(index);
    if (!segment) return undefined;
    const k = index - segment.firstIndex;
    if (segment.kind === 'stored') return segment.transitions[k];
    const content = this.materialise(segment.run)[segment.from + k] as TransitionContent;
    return { position: segment.firstPosition + k, events: content.events, quality: content.quality };
  }

  transitionAt(position: number): Transition | undefined {
    const t = this.at(this.indexAfter(position - 1));
    return t?.position === position ? t : undefined;
  }

  /** Retained transitions with after < position <= upTo, in journal order. */
  *range(after: number, upTo: number): Generator<Transition> {
    for (let i = this.indexAfter(after); i < this.size; i++) {
      const t = this.at(i) as Transition;
      if (t.position > upTo) return;
      yield t;
    }
  }

  /** The source quality of every scope as of `position` (the last change at or below it). */
  qualityAt(position: number): QualityScope[] {
    const state = new Map<string, QualityScope>(
      this.scopes.map((scope) => [scope, { scope, state: 'ok', lastPosition: 0 }]),
    );
    for (const q of this.qualityLog) {
      if (q.position > position) break;
      state.set(q.scope, { scope: q.scope, state: q.state, lastPosition: q.position });
    }
    return [...state.values()];
  }

  /** `redelivery`: an eventId already in the journal is accepted when its content is identical. */
  private insert(transition: Transition, opts: { redelivery: boolean }): void {
    if (transition.position <= this.headPosition) {
      throw new JournalError(
        'position_not_increasing',
        `position ${transition.position} is not above the head ${this.headPosition}`,
      );
    }
    const inTransition = new Set<string>();
    for (const e of transition.events) {
      const earlier = this.eventById(e.eventId);
      if (inTransition.has(e.eventId) || (earlier && !(opts.redelivery && sameContent(earlier, e)))) {
        throw new JournalError(
          'duplicate_event_id',
          `eventId ${e.eventId} is already in the journal${opts.redelivery ? ' with other content' : ''}`,
        );
      }
      inTransition.add(e.eventId);
    }
    for (const e of transition.events) {
      if (!this.eventById(e.eventId)) this.storedEventsById.set(e.eventId, e);
      const seq = /^ev-[0-9a-f]+-([0-9a-z]+)$/.exec(e.eventId)?.[1];
      if (seq !== undefined) this.eventSeq = Math.max(this.eventSeq, parseInt(seq, 36));
    }
    for (const q of transition.quality) this.qualityLog.push({ ...q, position: transition.position });
    const last = this.segments.at(-1);
    if (last?.kind === 'stored') last.transitions.push(transition);
    else this.segments.push({ kind: 'stored', transitions: [transition], firstIndex: this.size });
    this.headPosition = transition.position;
  }

  /** The first event appended with this eventId, stored or generated. */
  private eventById(eventId: string): JournalEvent | undefined {
    const stored = this.storedEventsById.get(eventId);
    if (stored) return stored;
    const match = /^ev-([0-9a-f]+)-([0-9a-z]+)$/.exec(eventId);
    if (!match || match[1] !== (this.seed >>> 0).toString(16)) return undefined;
    const seq = parseInt(match[2] as string, 36);
    // The run whose events took the sequence numbers firstEventSeq + 1 .. lastEventSeq.
    let lo = 0;
    let hi = this.runs.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if ((this.runs[mid] as GeneratedRun).lastEventSeq < seq) lo = mid + 1;
      else hi = mid;
    }
    const run = this.runs[lo];
    if (!run || seq <= run.firstEventSeq) return undefined;
    for (const content of this.materialise(run)) {
      const event = content.events.find((e) => e.eventId === eventId);
      if (event) return event;
    }
    return undefined;
  }

  /** A run's transitions, regenerated from its saved generator state unless recently used. */
  private materialise(run: GeneratedRun): TransitionContent[] {
    const cached = this.cache.get(run);
    if (cached) {
      // Most recently used last.
      this.cache.delete(run);
      this.cache.set(run, cached);
      return cached;
    }
    const generator = ActivityGenerator.restore(run.state);
    const contents: TransitionContent[] = [];
    let seq = run.firstEventSeq;
    for (let i = 0; i < run.count; i++) {
      const content = generatedContent(generator.next(), seq, this.seed);
      seq += content.events.length;
      contents.push(content);
    }
    this.cache.set(run, contents);
    if (this.cache.size > this.cachedRuns) this.cache.delete(this.cache.keys().next().value as GeneratedRun);
    return contents;
  }

  private segmentAt(index: number): Segment | undefined {
    let lo = 0;
    let hi = this.segments.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const segment = this.segments[mid] as Segment;
      if (segment.firstIndex + segmentLength(segment) <= index) lo = mid + 1;
      else hi = mid;
    }
    const segment = this.segments[lo];
    return segment && index >= segment.firstIndex ? segment : undefined;
  }

  private positionAtIndex(index: number): number | undefined {
    const segment = this.segmentAt(index);
    if (!segment) return undefined;
    const k = index - segment.firstIndex;
    return segment.kind === 'generated' ? segment.firstPosition + k : segment.transitions[k]?.position;
  }

  private reindex(): void {
    let index = 0;
    this.segments = this.segments.filter((segment) => segmentLength(segment) > 0);
    for (const segment of this.segments) {
      segment.firstIndex = index;
      index += segmentLength(segment);
    }
  }

  private nextEventId(): string {
    this.eventSeq += 1;
    return eventIdOf(this.seed, this.eventSeq);
  }

  private reseededGenerator(): ActivityGenerator {
    const universe = buildUniverse({ seed: this.seed, ...this.universeSize });
    const last = this.at(this.size - 1)?.events.at(-1);
    const startMs = last ? Date.parse(last.observedAt) : Date.parse(DEFAULT_START_TIME);
    return new ActivityGenerator(
      universe,
      (this.seed ^ this.headPosition) >>> 0,
      { ...DEFAULT_ACTIVITY, scopes: this.scopes },
      Number.isFinite(startMs) ? startMs : 0,
    );
  }
}

/** Content identity (docs/protocol.md §4): what an event says, not where or when it was delivered. */
function sameContent(a: JournalEvent, b: JournalEvent): boolean {
  return (
    a.kind === b.kind &&
    a.entityId === b.entityId &&
    a.revision === b.revision &&
    canonicalJson(a.data) === canonicalJson(b.data)
  );
}
