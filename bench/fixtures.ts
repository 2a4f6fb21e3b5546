// Builders of checkpoint plans and staged events (pure): the commit bench's workload and the fixtures of the
// commit and decide tests. Outside test/ so the bench does not depend on the test tree.
import { isSupportedKind, parseTradeData, WireError, type TradeData } from '../protocol/codec.js';
import type { CheckpointOutcome, CommitResult } from '../db/commit-types.js';
import { eventContentHash, filterHash } from '../protocol/canonical.js';
import {
  whaleAlertRules,
  type ActionRules,
  type Binding,
  type CheckpointPlan,
  type EventDelivery,
  type QualityNotice,
  type QuarantineReason,
  type StagedEvent,
  type StartMode,
} from '../protocol/types.js';

export const STREAM = 'polymarket';
export const HISTORY_ID = 'hist-1';

export function makeBinding(
  consumerId: string,
  generation = 1,
  filter: Binding['filter'] = { kinds: ['trade', 'correction'] },
): Binding {
  return {
    consumerId,
    subscriptionId: `sub-${consumerId}`,
    stream: STREAM,
    historyId: HISTORY_ID,
    filter,
    filterHash: filterHash(filter),
    generation,
    mappings: { 'asset-1': { market: 'm-1', outcome: 'YES' } },
  };
}

export function tradeData(overrides: Partial<TradeData> = {}): TradeData {
  return {
    market: 'm-1',
    asset: 'asset-1',
    side: 'BUY',
    price: '0.5',
    size: '100',
    wallet: 'w-1',
    txHash: '0xabc',
    ...overrides,
  };
}

/**
 * The trade staging would carry: null for an unsupported kind, and for malformed data too — a plan built here
 * bypasses staging, and the commit must refuse a supported kind without its trade.
 */
function parsedTrade(kind: string, data: unknown): TradeData | null {
  if (!isSupportedKind(kind)) return null;
  try {
    return parseTradeData(kind, data);
  } catch (error) {
    if (error instanceof WireError) return null;
    throw error;
  }
}

const FIXTURE_OBSERVED_AT = '2026-11-29T12:00:00.000Z';

export function stagedEvent(fields: {
  position: number;
  ordinal?: number;
  eventId?: string;
  kind: string;
  entityId: string;
  revision?: number;
  data: Record<string, unknown>;
  /** Default live, received a second after it was observed: a whale alerts. */
  delivery?: EventDelivery;
}): StagedEvent {
  const ordinal = fields.ordinal ?? 1;
  const revision = fields.revision ?? 1;
  const eventId = fields.eventId ?? `ev-${fields.position}-${ordinal}`;
  const content = { kind: fields.kind, entityId: fields.entityId, revision, data: fields.data };
  return {
    position: fields.position,
    ordinal,
    eventId,
    kind: fields.kind,
    entityId: fields.entityId,
    revision,
    observedAt: FIXTURE_OBSERVED_AT,
    data: fields.data,
    trade: parsedTrade(fields.kind, fields.data),
    contentHash: eventContentHash(content),
    delivery: fields.delivery ?? 'live',
    receivedAt: Date.parse(FIXTURE_OBSERVED_AT) + 1_000,
  };
}

export function trade(
  position: number,
  entityId: string,
  data: Partial<TradeData> = {},
  more: { ordinal?: number; eventId?: string; delivery?: EventDelivery } = {},
): StagedEvent {
  return stagedEvent({ position, kind: 'trade', entityId, revision: 1, data: tradeData(data), ...more });
}

export function correction(
  position: number,
  entityId: string,
  revision: number,
  data: Partial<TradeData> = {},
  more: { ordinal?: number; eventId?: string; delivery?: EventDelivery } = {},
): StagedEvent {
  return stagedEvent({ position, kind: 'correction', entityId, revision, data: tradeData(data), ...more });
}

export interface PlanOptions {
  fence: { leaseEpoch: number; version: number };
  position: number;
  events?: StagedEvent[];
  quality?: QualityNotice[];
  startMode?: StartMode;
  generation?: number;
  token?: string;
  cutPosition?: number;
  terminalReasons?: QuarantineReason[];
  whaleAlertMinNotional?: string | null;
  /** The other whale alert rules (age bound, alerts on replay). */
  alertRules?: Partial<ActionRules>;
  filter?: Binding['filter'];
}

export function makePlan(consumerId: string, o: PlanOptions): CheckpointPlan {
  const generation = o.generation ?? 1;
  const cutPosition = o.cutPosition ?? o.position;
  return {
    consumerId,
    fence: o.fence,
    startMode: o.startMode ?? 'resume',
    binding: makeBinding(consumerId, generation, o.filter),
    checkpoint: {
      position: o.position,
      token: o.token ?? `tok:${generation}:${o.position}`,
      generation,
      cutPosition,
      cutReached: o.position >= cutPosition,
    },
    events: o.events ?? [],
    qualityNotices: o.quality ?? [],
    quarantinePolicy: { terminalReasons: o.terminalReasons ?? [] },
    actions: whaleAlertRules(o.whaleAlertMinNotional ?? null, o.alertRules),
  };
}

/** The result of a commit the test expects to have committed; fails naming the outcome otherwise. */
export function committed(outcome: CheckpointOutcome): CommitResult {
  if (outcome.kind !== 'committed') throw new Error(`expected the commit to commit, got ${JSON.stringify(outcome)}`);
  return outcome;
}

const MARKETS = 20;
export const WHALE_ALERT_MIN_NOTIONAL = '450';
/** Every WHALE_EVERY-th event is a whale: the outbox path is a tenth of the work, as the table says. */
const WHALE_EVERY = 10;

/**
 * A stream of fresh checkpoints, the commit benches' workload: every event new, a realistic spread over markets,
 * exactly one in WHALE_EVERY a whale alert (notional >= 500 against the threshold of 450; every other event stays
 * below 0.97 × 400.25 ≈ 388). By default the first checkpoint is the consumer's first (from_floor at position 1);
 * `after` continues a saved checkpoint at that position instead, and `eventId` names the events (the age bench
 * gives them the simulator's format, as the rows it loaded have).
 */
export function freshCheckpoints(
  consumerId: string,
  {
    after = 0,
    eventId = (serial: number) => `ev-${serial}`,
  }: { after?: number; eventId?: (serial: number) => string } = {},
) {
  let position = after;
  let serial = 0;
  return (size: number, fence: { leaseEpoch: number; version: number }): CheckpointPlan => {
    const events: StagedEvent[] = [];
    position += 1;
    for (let ordinal = 1; ordinal <= size; ordinal++) {
      serial += 1;
      const whale = serial % WHALE_EVERY === 0;
      const price = whale ? `0.${50 + (serial % 47)}` : `0.${(serial % 97) + 1}`;
      const size = whale ? `${1000 + (serial % 500)}.25` : `${(serial % 400) + 1}.25`;
      events.push(
        trade(
          position,
          `ent-${serial}`,
          { market: `m-${serial % MARKETS}`, price, size },
          { ordinal, eventId: eventId(serial) },
        ),
      );
    }
    return makePlan(consumerId, {
      fence,
      position,
      events,
      whaleAlertMinNotional: WHALE_ALERT_MIN_NOTIONAL,
      startMode: position === 1 ? 'from_floor' : 'resume',
    });
  };
}
