// The append-only journal behind the reference server: transitions at strictly increasing positions,
// each with 1..n source events and optional quality changes. A seeded generator produces realistic
// Polymarket activity (whales and small wallets trading Yes/No tokens, corrections of earlier trades,
// jittered observedAt), so every test and benchmark can rebuild the exact same stream from a seed.
import { createReadStream } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { z } from 'zod';
import { canonicalJson } from '../protocol/canonical.js';
import type { History, Mappings, QualityScope, QualityState } from '../protocol/codec.js';

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
}

export const DEFAULT_SCOPES = ['polymarket:clob', 'polymarket:chain'] as const;

/** A small, fast, seedable PRNG: deterministic across platforms (32-bit integer arithmetic only). */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const TOPICS = [
  'btc',
  'eth',
  'sol',
  'fed',
  'election',
  'nba',
  'nfl',
  'oscars',
  'gdp',
  'cpi',
  'spacex',
  'ai',
  'oil',
  'gold',
];
const VERBS = ['above', 'below', 'wins', 'cuts-rates', 'hits', 'launches', 'passes', 'beats'];
const MONTHS = ['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'];

interface Universe {
  markets: string[];
  /** asset id -> market and outcome; each market has a Yes and a No token. */
  mappings: Mappings;
  assetsByMarket: Map<string, [string, string]>;
  whales: string[];
  smallWallets: string[];
}

function buildUniverse(
  opts: Required<Pick<GeneratorOptions, 'seed' | 'markets' | 'whales' | 'smallWallets'>>,
): Universe {
  const rng = mulberry32(opts.seed ^ 0x5eed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rng() * xs.length)] as T;
  const digits = (n: number): string =>
    Array.from({ length: n }, (_, i) => String(Math.floor(rng() * 10) || (i === 0 ? 1 : 0))).join('');
  const hex = (n: number): string => Array.from({ length: n }, () => Math.floor(rng() * 16).toString(16)).join('');
  const markets: string[] = [];
  const mappings: Mappings = {};
  const assetsByMarket = new Map<string, [string, string]>();
  for (let i = 0; i < opts.markets; i++) {
    const market = `will-${pick(TOPICS)}-${pick(VERBS)}-${pick(MONTHS)}-${2026 + (i % 2)}-${i}`;
    const yes = digits(40);
    const no = digits(40);
    markets.push(market);
    mappings[yes] = { market, outcome: 'Yes' };
    mappings[no] = { market, outcome: 'No' };
    assetsByMarket.set(market, [yes, no]);
  }
  const whales = Array.from({ length: opts.whales }, () => `0x${hex(40)}`);
  const smallWallets = Array.from({ length: opts.smallWallets }, () => `0x${hex(40)}`);
  return { markets, mappings, assetsByMarket, whales, smallWallets };
}

interface KnownTrade {
  entityId: string;
  revision: number;
  data: Record<string, unknown>;
}

/** Produces the next transitions of a seeded market; its state continues across calls (live appends). */
class ActivityGenerator {
  private readonly rng: () => number;
  /** Recent trades are the correction targets (a bounded window keeps generation O(1) per event). */
  private readonly recentTrades: KnownTrade[] = [];
  private readonly tradesById = new Map<string, KnownTrade>();
  private clockMs: number;
  private entitySeq = 0;

  constructor(
    private readonly universe: Universe,
    rngSeed: number,
    private readonly settings: {
      correctionRate: number;
      qualityRate: number;
      maxEventsPerTransition: number;
      scopes: readonly string[];
    },
    startMs: number,
  ) {
    this.rng = mulberry32(rngSeed);
    this.clockMs = startMs;
  }

  /** Makes trades already in the journal (a loaded file) available as correction targets. */
  remember(event: JournalEvent): void {
    if (event.kind !== 'trade' && event.kind !== 'correction') return;
    const known = this.tradesById.get(event.entityId);
    if (known) {
      // A redelivered older revision (an overlapping redelivery) does not roll the entity back.
      if (event.revision >= known.revision) {
        known.revision = event.revision;
        known.data = event.data;
      }
    } else {
      this.track({ entityId: event.entityId, revision: event.revision, data: event.data });
    }
    this.entitySeq += 1;
    const observed = Date.parse(event.observedAt);
    if (Number.isFinite(observed) && observed > this.clockMs) this.clockMs = observed;
  }

  next(): NewTransition {
    const count = 1 + Math.floor(this.rng() * this.settings.maxEventsPerTransition);
    this.clockMs += 500 + Math.floor(this.rng() * 2500);
    const events: NewEvent[] = [];
    for (let i = 0; i < count; i++) {
      const target =
        this.recentTrades.length > 0 && this.rng() < this.settings.correctionRate
          ? this.recentTrades[Math.floor(this.rng() * this.recentTrades.length)]
          : undefined;
      events.push(target ? this.correction(target) : this.trade());
    }
    const quality: QualityChange[] = [];
    if (this.rng() < this.settings.qualityRate) {
      const scope = this.settings.scopes[Math.floor(this.rng() * this.settings.scopes.length)] ?? DEFAULT_SCOPES[0];
      const r = this.rng();
      quality.push({ scope, state: r < 0.6 ? 'ok' : r < 0.9 ? 'degraded' : 'gap' });
    }
    return { events, quality };
  }

  private observedAt(): string {
    // Up to ±4 s of jitter: observedAt is not monotonic, consumers must order by journal position.
    return new Date(this.clockMs + Math.floor((this.rng() - 0.5) * 8000)).toISOString();
  }

  private trade(): NewEvent {
    const u = this.universe;
    const market = u.markets[Math.floor(this.rng() * u.markets.length)] as string;
    const [yes, no] = u.assetsByMarket.get(market) as [string, string];
    const whale = this.rng() < 0.15;
    const wallet = whale
      ? u.whales[Math.floor(this.rng() * u.whales.length)]
      : u.smallWallets[Math.floor(this.rng() * u.smallWallets.length)];
    const data = {
      market,
      asset: this.rng() < 0.5 ? yes : no,
      side: this.rng() < 0.5 ? 'BUY' : 'SELL',
      price: this.price(),
      size: this.size(whale),
      wallet: wallet as string,
      txHash: `0x${this.hex32()}`,
    };
    this.entitySeq += 1;
    const entityId = `trade-${this.entitySeq.toString(36).padStart(6, '0')}-${data.txHash.slice(2, 10)}`;
    this.track({ entityId, revision: 1, data });
    return { kind: 'trade', entityId, revision: 1, observedAt: this.observedAt(), data };
  }

  private correction(target: KnownTrade): NewEvent {
    target.revision += 1;
    const data = { ...target.data, price: this.price(), size: this.size(Number(target.data.size) >= 1000) };
    target.data = data;
    return {
      kind: 'correction',
      entityId: target.entityId,
      revision: target.revision,
      observedAt: this.observedAt(),
      data,
    };
  }

  private track(trade: KnownTrade): void {
    this.recentTrades.push(trade);
    this.tradesById.set(trade.entityId, trade);
    if (this.recentTrades.length > 512) {
      const dropped = this.recentTrades.shift() as KnownTrade;
      this.tradesById.delete(dropped.entityId);
    }
  }

  /** 64 hex digits, 8 at a time. */
  private hex32(): string {
    let out = '';
    for (let i = 0; i < 8; i++)
      out += Math.floor(this.rng() * 0x100000000)
        .toString(16)
        .padStart(8, '0');
    return out;
  }

  private price(): string {
    return `0.${String(1 + Math.floor(this.rng() * 998)).padStart(3, '0')}`;
  }

  private size(whale: boolean): string {
    const whole = whale ? 1000 + Math.floor(this.rng() * 49_000) : 1 + Math.floor(this.rng() * 500);
    return `${whole}.${String(Math.floor(this.rng() * 100)).padStart(2, '0')}`;
  }
}

const journalEventSchema = z.object({
  ordinal: z.number().int().positive(),
  eventId: z.string().min(1),
  kind: z.string().min(1),
  entityId: z.string().min(1),
  revision: z.number().int().positive(),
  observedAt: z.string(),
  data: z.record(z.string(), z.unknown()),
});
const qualityChangeSchema = z.object({ scope: z.string().min(1), state: z.enum(['ok', 'degraded', 'gap']) });
const headerRecordSchema = z.object({
  record: z.literal('header'),
  historyId: z.string().min(1),
  floor: z.number().int().positive(),
  seed: z.number().int(),
  scopes: z.array(z.string().min(1)),
  universe: z.object({
    markets: z.number().int().positive(),
    whales: z.number().int().positive(),
    smallWallets: z.number().int().positive(),
  }),
});
const transitionRecordSchema = z.object({
  record: z.literal('transition'),
  position: z.number().int().positive(),
  events: z.array(journalEventSchema).min(1),
  quality: z.array(qualityChangeSchema),
});

export type AppendListener = (transition: Transition) => void;

interface QualityLogEntry extends QualityChange {
  position: number;
}

export class Journal {
  private transitions: Transition[] = [];
  private qualityLog: QualityLogEntry[] = [];
  /** Every event ever appended, by eventId (retention does not forget them: a redelivery may repeat one). */
  private readonly eventsById = new Map<string, JournalEvent>();
  private readonly appendListeners = new Set<AppendListener>();
  private readonly rebuildListeners = new Set<() => void>();
  private headPosition = 0;
  private eventSeq = 0;
  private rebuilds = 0;
  private liveTimer: NodeJS.Timeout | undefined;
  private generator: ActivityGenerator;
  private historyIdValue: string;
  private floorValue = 1;
  readonly mappings: Mappings;
  readonly scopes: readonly string[];

  private constructor(
    readonly seed: number,
    private readonly universeSize: { markets: number; whales: number; smallWallets: number },
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
        correctionRate: opts.correctionRate ?? 0.05,
        qualityRate: opts.qualityRate ?? 0.01,
        maxEventsPerTransition: opts.maxEventsPerTransition ?? 4,
        scopes: DEFAULT_SCOPES,
        startMs: Date.parse(opts.startTime ?? '2026-01-01T00:00:00.000Z'),
        historyId: `hist-${(opts.seed >>> 0).toString(16)}`,
      },
    );
    for (let i = 0; i < opts.transitions; i++) journal.appendGenerated();
    return journal;
  }

  /** Reads a journal written by `save`. Live generation continues from the loaded content. */
  static async load(file: string): Promise<Journal> {
    const lines = createInterface({ input: createReadStream(file, 'utf8'), crlfDelay: Infinity });
    let journal: Journal | undefined;
    let lineNo = 0;
    for await (const line of lines) {
      lineNo += 1;
      if (line.trim() === '') continue;
      let json: unknown;
      try {
        json = JSON.parse(line);
      } catch {
        throw new JournalError('invalid_journal_file', `${file}:${lineNo} is not valid JSON`);
      }
      if (!journal) {
        const header = headerRecordSchema.safeParse(json);
        if (!header.success)
          throw new JournalError('invalid_journal_file', `${file}:${lineNo} must be the header record`);
        const h = header.data;
        journal = new Journal(h.seed, h.universe, {
          correctionRate: 0.05,
          qualityRate: 0.01,
          maxEventsPerTransition: 4,
          scopes: h.scopes,
          startMs: 0,
          historyId: h.historyId,
        });
        journal.floorValue = h.floor;
        continue;
      }
      const parsed = transitionRecordSchema.safeParse(json);
      if (!parsed.success)
        throw new JournalError(
          'invalid_journal_file',
          `${file}:${lineNo}: ${parsed.error.issues[0]?.message ?? 'invalid transition'}`,
        );
      const { record: _record, ...transition } = parsed.data;
      journal.insert(transition, { redelivery: true });
    }
    if (!journal) throw new JournalError('invalid_journal_file', `${file} is empty`);
    // Live appends continue deterministically from where the file ends.
    journal.generator = journal.reseededGenerator();
    for (const t of journal.transitions) for (const e of t.events) journal.generator.remember(e);
    journal.floorValue = Math.max(journal.floorValue, 1);
    return journal;
  }

  async save(file: string): Promise<void> {
    const header = {
      record: 'header',
      historyId: this.historyIdValue,
      floor: this.floorValue,
      seed: this.seed,
      scopes: this.scopes,
      universe: this.universeSize,
    };
    const lines = [
      JSON.stringify(header),
      ...this.transitions.map((t) => JSON.stringify({ record: 'transition', ...t })),
    ];
    await writeFile(file, `${lines.join('\n')}\n`, 'utf8');
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
  get size(): number {
    return this.transitions.length;
  }

  /** Appends one transition at head + 1 and tells live listeners. */
  append(input: NewTransition): Transition {
    if (input.events.length === 0)
      throw new JournalError('empty_transition', 'a transition holds at least one source event');
    const position = this.headPosition + 1;
    const events = input.events.map((e, i): JournalEvent => {
      const eventId = e.eventId ?? this.nextEventId();
      return { ...e, ordinal: i + 1, eventId };
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
      const earlier = this.eventsById.get(eventId);
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

  /** Appends the generator's next transition. */
  appendGenerated(): Transition {
    return this.append(this.generator.next());
  }

  /** Appends `perSecond` generated transitions per second until stopped (or the server closes). */
  startLiveAppends(perSecond: number): void {
    this.stopLiveAppends();
    if (perSecond <= 0) return;
    this.liveTimer = setInterval(() => this.appendGenerated(), Math.max(1, Math.round(1000 / perSecond)));
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
    this.transitions = this.transitions.slice(this.indexAfter(position - 1));
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
    const renumber = new Map<number, number>();
    this.transitions = this.transitions.map((t, i) => {
      renumber.set(t.position, shift + i + 1);
      return { ...t, position: shift + i + 1 };
    });
    this.qualityLog = this.qualityLog.flatMap((q) => {
      const position = renumber.get(q.position);
      return position === undefined ? [] : [{ ...q, position }];
    });
    this.headPosition = this.transitions.at(-1)?.position ?? shift;
    this.floorValue = 1;
    for (const listener of this.rebuildListeners) listener();
  }

  /** Index of the first retained transition with position > `position` (binary search). */
  indexAfter(position: number): number {
    let lo = 0;
    let hi = this.transitions.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if ((this.transitions[mid] as Transition).position <= position) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  at(index: number): Transition | undefined {
    return this.transitions[index];
  }

  transitionAt(position: number): Transition | undefined {
    const t = this.transitions[this.indexAfter(position - 1)];
    return t?.position === position ? t : undefined;
  }

  /** Retained transitions with after < position <= upTo, in journal order. */
  *range(after: number, upTo: number): Generator<Transition> {
    for (let i = this.indexAfter(after); i < this.transitions.length; i++) {
      const t = this.transitions[i] as Transition;
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
      const earlier = this.eventsById.get(e.eventId);
      if (inTransition.has(e.eventId) || (earlier && !(opts.redelivery && sameContent(earlier, e)))) {
        throw new JournalError(
          'duplicate_event_id',
          `eventId ${e.eventId} is already in the journal${opts.redelivery ? ' with other content' : ''}`,
        );
      }
      inTransition.add(e.eventId);
    }
    for (const e of transition.events) {
      if (!this.eventsById.has(e.eventId)) this.eventsById.set(e.eventId, e);
      const seq = /^ev-[0-9a-f]+-([0-9a-z]+)$/.exec(e.eventId)?.[1];
      if (seq !== undefined) this.eventSeq = Math.max(this.eventSeq, parseInt(seq, 36));
    }
    for (const q of transition.quality) this.qualityLog.push({ ...q, position: transition.position });
    this.transitions.push(transition);
    this.headPosition = transition.position;
  }

  private nextEventId(): string {
    this.eventSeq += 1;
    return `ev-${(this.seed >>> 0).toString(16)}-${this.eventSeq.toString(36).padStart(7, '0')}`;
  }

  private reseededGenerator(): ActivityGenerator {
    const universe = buildUniverse({ seed: this.seed, ...this.universeSize });
    const last = this.transitions.at(-1)?.events.at(-1);
    const startMs = last ? Date.parse(last.observedAt) : Date.parse('2026-01-01T00:00:00.000Z');
    return new ActivityGenerator(
      universe,
      (this.seed ^ this.headPosition) >>> 0,
      {
        correctionRate: 0.05,
        qualityRate: 0.01,
        maxEventsPerTransition: 4,
        scopes: this.scopes,
      },
      Number.isFinite(startMs) ? startMs : 0,
    );
  }
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

/** Content identity (PROTOCOL.md section 4): what an event says, not where or when it was delivered. */
function sameContent(a: JournalEvent, b: JournalEvent): boolean {
  return (
    a.kind === b.kind &&
    a.entityId === b.entityId &&
    a.revision === b.revision &&
    canonicalJson(a.data) === canonicalJson(b.data)
  );
}
