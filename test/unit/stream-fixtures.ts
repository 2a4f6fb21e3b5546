// Builders for the unit tests of the client session: journals, the frame stream a correct server sends for
// them, and a driver that feeds a Session and commits every plan it asks for.
import fc from 'fast-check';
import { filterHash } from '../../protocol/canonical.js';
import {
  PROTOCOL_NAME,
  type ServerFrame,
  type ServerFrameBody,
  type StreamFilter,
  type WireEvent,
} from '../../protocol/codec.js';
import { Session, type SessionAction, type SessionOptions } from '../../protocol/session.js';
import type { CheckpointPlan, QualityNotice } from '../../protocol/types.js';
import { NO_ACTIONS } from '../../protocol/types.js';

export const FILTER: StreamFilter = { kinds: ['trade', 'correction'] };

export interface Transition {
  position: number;
  sourceEventCount: number;
  /** the matched events (ordinal subset), empty when the filter matched nothing here */
  events: WireEvent[];
  /** a quality notice published at this position instead of events */
  quality?: QualityNotice;
}

const tradeData = (i: number) => ({
  market: `m${i % 3}`,
  asset: `a${i % 5}`,
  side: i % 2 ? 'BUY' : 'SELL',
  price: `0.${(i % 9) + 1}`,
  size: `${i + 1}`,
  wallet: `w${i % 4}`,
  txHash: `0x${i.toString(16)}`,
});

/** A journal of batch and quality transitions at strictly increasing positions with random gaps. */
export const journalArb = fc
  .array(
    fc.record({
      gap: fc.integer({ min: 1, max: 4 }),
      quality: fc.option(
        fc.record({
          scope: fc.constantFrom('polygon', 'clob'),
          state: fc.constantFrom('ok' as const, 'degraded' as const, 'gap' as const),
        }),
        { freq: 5 },
      ),
      sourceEventCount: fc.integer({ min: 1, max: 4 }),
      matchMask: fc.array(fc.boolean(), { minLength: 4, maxLength: 4 }),
      kinds: fc.array(fc.constantFrom('trade', 'trade', 'correction', 'mystery'), { minLength: 4, maxLength: 4 }),
      observedAt: fc.array(fc.date({ min: new Date('2020-01-01'), max: new Date('2030-01-01'), noInvalidDate: true }), {
        minLength: 4,
        maxLength: 4,
      }),
    }),
    { maxLength: 25 },
  )
  .map((rows) => {
    let position = 0;
    let counter = 0;
    return rows.map((row): Transition => {
      position += row.gap;
      if (row.quality) return { position, sourceEventCount: 1, events: [], quality: { position, ...row.quality } };
      const events: WireEvent[] = [];
      for (let ordinal = 1; ordinal <= row.sourceEventCount; ordinal += 1) {
        counter += 1;
        if (!row.matchMask[ordinal - 1]) continue;
        events.push({
          ordinal,
          eventId: `e-${position}-${ordinal}`,
          kind: row.kinds[ordinal - 1]!,
          entityId: `x${counter % 7}`,
          revision: 1,
          observedAt: row.observedAt[ordinal - 1]!.toISOString(),
          data: tradeData(counter),
        });
      }
      return { position, sourceEventCount: row.sourceEventCount, events };
    });
  });

export interface Scenario {
  journal: Transition[];
  /** indices into the journal after which a checkpoint is sent (the last one always reaches the cut) */
  checkpointAfter: number[];
  cut: number;
}

export const scenarioArb: fc.Arbitrary<Scenario> = journalArb.chain((journal) =>
  fc
    .record({
      journal: fc.constant(journal),
      checkpointAfter: fc.subarray(journal.map((_, i) => i)),
      tail: fc.integer({ min: 0, max: 3 }),
    })
    .map(({ journal: j, checkpointAfter, tail }) => ({
      journal: j,
      checkpointAfter,
      cut: (j.at(-1)?.position ?? 0) + tail,
    })),
);

export interface StreamOptions {
  consumerId?: string;
  subscriptionId?: string;
  generation?: number;
  startPosition?: number;
  historyId?: string;
  filter?: StreamFilter;
}

/** The frames a correct server sends for a scenario, numbered 1.. from hello. */
export function framesFor(scenario: Scenario, opts: StreamOptions = {}): ServerFrame[] {
  const generation = opts.generation ?? 1;
  const start = opts.startPosition ?? 0;
  const shift = (p: number) => p + start;
  const bodies: ServerFrameBody[] = [
    {
      type: 'hello',
      frameSequence: 0,
      protocol: PROTOCOL_NAME,
      connectionId: 'conn-1',
      stream: 'polymarket',
      history: { id: opts.historyId ?? 'h1', floor: 0, head: shift(scenario.cut) },
    },
    { type: 'authenticated', frameSequence: 0, principal: 'tester' },
    {
      type: 'subscribed',
      frameSequence: 0,
      consumerId: opts.consumerId ?? 'c1',
      subscriptionId: opts.subscriptionId ?? 's1',
      generation,
      filterHash: filterHash(opts.filter ?? FILTER),
      startPosition: start,
      cut: { position: shift(scenario.cut) },
      mappings: { a1: { market: 'm1', outcome: 'YES' } },
      sourceQuality: { asOf: shift(scenario.cut), scopes: [{ scope: 'polygon', state: 'ok', lastPosition: start }] },
    },
  ];
  let batches = 0;
  let token = 0;
  const checkpoint = (position: number) => {
    token += 1;
    bodies.push({
      type: 'checkpoint',
      frameSequence: 0,
      generation,
      position,
      token: `tok-${token}`,
      batchCount: batches,
    });
    batches = 0;
  };
  scenario.journal.forEach((t, i) => {
    if (t.quality) {
      bodies.push({
        type: 'quality',
        frameSequence: 0,
        generation,
        position: shift(t.position),
        scope: t.quality.scope,
        state: t.quality.state,
        deliveryMode: 'replay',
      });
    } else if (t.events.length > 0) {
      bodies.push({
        type: 'batch',
        frameSequence: 0,
        generation,
        position: shift(t.position),
        deliveryMode: 'replay',
        sourceEventCount: t.sourceEventCount,
        matchedEventCount: t.events.length,
        events: t.events,
      });
      batches += 1;
    }
    if (scenario.checkpointAfter.includes(i)) checkpoint(shift(t.position));
  });
  checkpoint(shift(scenario.cut));
  bodies.push({ type: 'caught_up', frameSequence: 0, generation, cut: { position: shift(scenario.cut) } });
  return resequence(bodies as ServerFrame[]);
}

/** Renumbers frameSequence 1.. in the given order (a server that sends the frames in this order). */
export function resequence(frames: ServerFrame[]): ServerFrame[] {
  return frames.map((f, i) => ({ ...f, frameSequence: i + 1 }));
}

export function sessionOptions(overrides: Partial<SessionOptions> = {}): SessionOptions {
  return {
    consumerId: 'c1',
    subscriptionId: 's1',
    filter: FILTER,
    start: { mode: 'from_floor' },
    saved: null,
    committedPosition: null,
    fence: { leaseEpoch: 1, version: 0 },
    quarantinePolicy: { terminalReasons: [] },
    actions: NO_ACTIONS,
    staging: { maxEvents: 10_000, maxBytes: 10_000_000, maxAgeMs: 60_000 },
    now: () => 0,
    ...overrides,
  };
}

export interface DriveResult {
  plans: CheckpointPlan[];
  acks: { position: number; token: string; generation: number }[];
  /** the first reconnect or stop action, if any */
  ended: Extract<SessionAction, { type: 'reconnect' | 'stop' }> | null;
  sent: SessionAction[];
  session: Session;
}

/** Feeds every frame, commits every plan at once (version + 1) and collects what the session asked for. */
export function drive(
  frames: ServerFrame[],
  opts: SessionOptions = sessionOptions(),
  beforeFrame?: (index: number) => void,
): DriveResult {
  const session = new Session(opts);
  const result: DriveResult = { plans: [], acks: [], ended: null, sent: [], session };
  let version = opts.fence.version;
  const perform = (actions: SessionAction[]) => {
    for (const action of actions) {
      if (action.type === 'commit') {
        result.plans.push(action.plan);
        version += 1;
        perform(session.committed(action.plan, { version }));
      } else if (action.type === 'send' && action.frame.type === 'ack') {
        result.acks.push({
          position: action.frame.position,
          token: action.frame.token,
          generation: action.frame.generation,
        });
      } else if (action.type === 'reconnect' || action.type === 'stop') {
        result.ended ??= action;
      } else {
        result.sent.push(action);
      }
    }
  };
  frames.forEach((frame, i) => {
    if (result.ended) return;
    beforeFrame?.(i);
    perform(session.receive(frame));
  });
  return result;
}
