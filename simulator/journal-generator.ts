// The seeded generator behind the reference server's journal: realistic Polymarket activity (whales and small
// wallets trading Yes/No tokens, corrections of earlier trades, jittered observedAt), the same from the same seed
// on every platform. Its state can be saved and restored, so the journal keeps only the state at the start of
// each run of transitions and regenerates a run when it is read (journal.ts).
import { isoTimestamp } from './iso-timestamp.js';
import type { JournalEvent, NewEvent, NewTransition, QualityChange } from './journal-types.js';
import type { Mappings } from '../protocol/codec.js';

export const DEFAULT_SCOPES = ['polymarket:clob', 'polymarket:chain'] as const;

/** The activity of a generated journal unless its options say otherwise, and of a loaded one's live appends. */
export const DEFAULT_ACTIVITY = { correctionRate: 0.05, qualityRate: 0.01, maxEventsPerTransition: 4 } as const;
/** observedAt of a generated journal's first transition unless its options say otherwise. */
export const DEFAULT_START_TIME = '2026-01-01T00:00:00.000Z';

/** A small, fast, seedable PRNG: deterministic across platforms (32-bit integer arithmetic only). */
function mulberry32(seed: number): () => number {
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

export interface Universe {
  markets: string[];
  /** asset id -> market and outcome; each market has a Yes and a No token. */
  mappings: Mappings;
  assetsByMarket: Map<string, [string, string]>;
  whales: string[];
  smallWallets: string[];
}

/** How many markets and wallets a seeded market has: with the seed, all its identities. */
export interface UniverseSize {
  markets: number;
  whales: number;
  smallWallets: number;
}

export function buildUniverse(opts: { seed: number } & UniverseSize): Universe {
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

export interface GeneratorSettings {
  correctionRate: number;
  qualityRate: number;
  maxEventsPerTransition: number;
  scopes: readonly string[];
}

/** Everything the generator's next transitions depend on: restoring it regenerates them exactly. */
export interface GeneratorState {
  universe: Universe;
  settings: GeneratorSettings;
  rngState: number;
  recentTrades: KnownTrade[];
  clockMs: number;
  entitySeq: number;
}

const HEX_BYTE = Array.from({ length: 256 }, (_, byte) => byte.toString(16).padStart(2, '0'));

/** Produces the next transitions of a seeded market; its state continues across calls (live appends). */
export class ActivityGenerator {
  /** mulberry32's state, kept here so that it can be saved and restored. */
  private rngState: number;
  /** Recent trades are the correction targets (a bounded window keeps generation O(1) per event). */
  private recentTrades: KnownTrade[] = [];
  private readonly tradesById = new Map<string, KnownTrade>();
  private clockMs: number;
  private entitySeq = 0;

  constructor(
    private readonly universe: Universe,
    rngSeed: number,
    private readonly settings: GeneratorSettings,
    startMs: number,
  ) {
    this.rngState = rngSeed >>> 0;
    this.clockMs = startMs;
  }

  /** The same sequence as mulberry32(rngSeed). */
  private rng(): number {
    return this.rngUint32() / 4294967296;
  }

  /** mulberry32's next output as the unsigned 32-bit integer it divides by 2^32 (exactly: a power of two). */
  private rngUint32(): number {
    this.rngState = (this.rngState + 0x6d2b79f5) >>> 0;
    let t = this.rngState;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  }

  /** A copy of the state (corrections mutate the window's trades, so they are copied too). */
  snapshot(): GeneratorState {
    return {
      universe: this.universe,
      settings: this.settings,
      rngState: this.rngState,
      recentTrades: this.recentTrades.map((t) => ({ ...t })),
      clockMs: this.clockMs,
      entitySeq: this.entitySeq,
    };
  }

  static restore(state: GeneratorState): ActivityGenerator {
    const generator = new ActivityGenerator(state.universe, 0, state.settings, state.clockMs);
    generator.rngState = state.rngState;
    generator.entitySeq = state.entitySeq;
    generator.recentTrades = state.recentTrades.map((t) => ({ ...t }));
    for (const trade of generator.recentTrades) generator.tradesById.set(trade.entityId, trade);
    return generator;
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
    return isoTimestamp(this.clockMs + Math.floor((this.rng() - 0.5) * 8000));
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

  /**
   * 64 hex digits, 8 per draw, byte by byte from a table: what Math.floor(rng() * 2^32).toString(16).padStart(8, '0')
   * gives, without the slow radix conversion of a double (it was a fifth of the server's CPU while regenerating).
   */
  private hex32(): string {
    let out = '';
    for (let i = 0; i < 8; i++) {
      const x = this.rngUint32();
      out += HEX_BYTE[x >>> 24]! + HEX_BYTE[(x >>> 16) & 0xff]! + HEX_BYTE[(x >>> 8) & 0xff]! + HEX_BYTE[x & 0xff]!;
    }
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

/** Transitions as the generator made them, without positions (retention and rebuilds move those). */
export interface TransitionContent {
  events: JournalEvent[];
  quality: QualityChange[];
}

export function eventIdOf(seed: number, seq: number): string {
  return `ev-${(seed >>> 0).toString(16)}-${seq.toString(36).padStart(7, '0')}`;
}

/** A generated transition's events as `append` writes them: ordinals, and eventIds after `eventSeq`. */
export function generatedContent(next: NewTransition, eventSeq: number, seed: number): TransitionContent {
  let seq = eventSeq;
  // Built field by field (a spread cost more than the rest of generating the event), in append's order: the order
  // docs/protocol.md lists them.
  const events = next.events.map((e, i): JournalEvent => ({
    ordinal: i + 1,
    eventId: eventIdOf(seed, (seq += 1)),
    kind: e.kind,
    entityId: e.entityId,
    revision: e.revision,
    observedAt: e.observedAt,
    data: e.data,
  }));
  return { events, quality: next.quality ?? [] };
}
