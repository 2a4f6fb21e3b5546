// The pure commit rules (domain/decide.ts), without a database: examples for each rule and properties over random
// journals (idempotence, split invariance, volume conservation).
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  decideCommit,
  newestNoticePerScope,
  noAlerts,
  validatePlanAgainstSaved,
  validatePlanShape,
  type CommitWrites,
  type ExecutionState,
  type ExistingQuarantine,
  type ExistingReceipt,
  type ExistingRows,
} from '../../domain/decide.js';
import { InvalidPlan } from '../../domain/errors.js';
import { addDecimal, formatDecimal, parseDecimal, subDecimal, type Decimal } from '../../protocol/decimal.js';
import type { CheckpointPlan, StagedEvent } from '../../protocol/types.js';
import { correction, makePlan, stagedEvent, trade } from '../../bench/fixtures.js';

const FENCE = { leaseEpoch: 1, version: 1 };
const empty = (): ExistingRows => ({ receipts: new Map(), quarantine: new Map(), executions: new Map() });

function committed(plan: CheckpointPlan, existing: ExistingRows = empty()): CommitWrites {
  const decision = decideCommit(plan, existing);
  if (decision.kind !== 'committed') throw new Error(`expected committed, got ${decision.kind}`);
  return decision.writes;
}

/** What the database holds after the writes: the read step's view for the next plan. */
function applied(existing: ExistingRows, writes: CommitWrites): ExistingRows {
  const receipts = new Map<string, ExistingReceipt>(existing.receipts);
  for (const { eventId, contentHash, position, ordinal, outcome } of writes.receipts)
    receipts.set(eventId, { contentHash, position, ordinal, outcome });
  const executions = new Map<string, ExecutionState>(existing.executions);
  for (const e of writes.executions) executions.set(e.entityId, e);
  const quarantine = new Map<string, ExistingQuarantine>(existing.quarantine);
  for (const q of writes.quarantine)
    quarantine.set(q.eventId, {
      contentHash: q.contentHash,
      position: q.position,
      ordinal: q.ordinal,
      disposition: q.disposition,
    });
  return { receipts, executions, quarantine };
}

describe('decideCommit rules', () => {
  it('a trade creates an execution and adds its notional; a correction changes volume by the difference', () => {
    const writes = committed(
      makePlan('c', {
        fence: FENCE,
        position: 2,
        events: [trade(1, 'x', { price: '0.5', size: '10' }), correction(2, 'x', 2, { price: '0.7', size: '10' })],
      }),
    );
    expect(writes.executions).toEqual([
      expect.objectContaining({ entityId: 'x', revision: 2, notional: '7', firstPosition: 1, lastPosition: 2 }),
    ]);
    expect(writes.marketDeltas).toEqual([{ market: 'm-1', volume: '7', count: 1 }]);
    expect(writes.revisions.map((r) => [r.revision, r.notional, r.eventId])).toEqual([[1, '5', 'ev-1-1']]); // superseded only
    expect(writes.counts).toEqual({ applied: 2, duplicates: 0, noEffect: 0, quarantined: 0, alerts: noAlerts() });
  });

  it('an identical receipt is a duplicate; a different content hash is a conflict naming both hashes', () => {
    const event = trade(1, 'x');
    const existing = applied(empty(), committed(makePlan('c', { fence: FENCE, position: 1, events: [event] })));
    expect(committed(makePlan('c', { fence: FENCE, position: 1, events: [event] }), existing).counts.duplicates).toBe(
      1,
    );
    const changed = { ...event, contentHash: 'other' };
    expect(decideCommit(makePlan('c', { fence: FENCE, position: 1, events: [changed] }), existing)).toEqual({
      kind: 'conflict',
      eventId: event.eventId,
      savedHash: event.contentHash,
      incomingHash: 'other',
    });
  });

  it('a correction at or below the saved revision has no effect but a receipt', () => {
    const existing = applied(
      empty(),
      committed(makePlan('c', { fence: FENCE, position: 2, events: [trade(1, 'x'), correction(2, 'x', 3)] })),
    );
    const writes = committed(
      makePlan('c', { fence: FENCE, position: 4, events: [correction(3, 'x', 2), correction(4, 'x', 3)] }),
      existing,
    );
    expect(writes.counts.noEffect).toBe(2);
    expect(writes.receipts.map((r) => r.outcome)).toEqual(['no_effect', 'no_effect']);
    expect(writes.executions).toEqual([]);
  });

  it('holds every unappliable event of the plan unless the policy makes its reason terminal', () => {
    const events = [
      correction(1, 'ghost', 2),
      stagedEvent({ position: 2, kind: 'split', entityId: 'y', data: {} }),
      trade(3, 'z'),
    ];
    const held = decideCommit(makePlan('c', { fence: FENCE, position: 3, events }), empty());
    expect(held.kind).toBe('held_quarantine');
    expect(held.kind === 'held_quarantine' && held.held.map((h) => [h.reason, h.disposition])).toEqual([
      ['unknown_correction_target', 'held'],
      ['unsupported_kind', 'held'],
    ]);
    const writes = committed(
      makePlan('c', {
        fence: FENCE,
        position: 3,
        events,
        terminalReasons: ['unknown_correction_target', 'unsupported_kind'],
      }),
    );
    expect(writes.quarantine.map((q) => q.disposition)).toEqual(['terminal', 'terminal']);
    expect(writes.counts).toMatchObject({ applied: 1, quarantined: 2 });
  });

  it('an operator-released record is a durable outcome; a retried one is tried again', () => {
    const ghost = correction(2, 'x', 2);
    const release: ExistingRows = {
      ...empty(),
      quarantine: new Map([[ghost.eventId, { ...ghost, disposition: 'terminal' }]]),
    };
    expect(committed(makePlan('c', { fence: FENCE, position: 2, events: [ghost] }), release).receipts[0]?.outcome).toBe(
      'quarantined',
    );
    // After a retry decision the target exists now (its trade comes first in this plan): applied.
    const retry: ExistingRows = {
      ...empty(),
      quarantine: new Map([[ghost.eventId, { ...ghost, disposition: 'retry' }]]),
    };
    expect(
      committed(makePlan('c', { fence: FENCE, position: 2, events: [trade(1, 'x'), ghost] }), retry).counts.applied,
    ).toBe(2);
  });

  it('writes a whale alert keyed by eventId at or above the threshold only', () => {
    const writes = committed(
      makePlan('c', {
        fence: FENCE,
        position: 2,
        whaleAlertMinNotional: '50',
        events: [trade(1, 'big', { price: '0.5', size: '100' }), trade(2, 'small', { price: '0.49', size: '100' })],
      }),
    );
    expect(writes.outbox.map((o) => o.idempotencyKey)).toEqual(['whale_alert:ev-1-1']);
  });

  it('keeps the newest quality notice per scope, the later one at equal positions', () => {
    expect(
      newestNoticePerScope([
        { scope: 'a', state: 'ok', position: 5 },
        { scope: 'a', state: 'gap', position: 3 },
        { scope: 'b', state: 'ok', position: 2 },
        { scope: 'b', state: 'degraded', position: 2 },
      ]),
    ).toEqual([
      { scope: 'a', state: 'ok', position: 5 },
      { scope: 'b', state: 'degraded', position: 2 },
    ]);
  });
});

describe('plan validation', () => {
  const saved = { position: 3, generation: 1, pendingStart: null, abandoned: false };
  const invalid = (fn: () => void) => expect(fn).toThrow(InvalidPlan);

  it('refuses malformed plans', () => {
    invalid(() => validatePlanShape(makePlan('c', { fence: FENCE, position: 5, token: '' })));
    invalid(() =>
      validatePlanShape(makePlan('c', { fence: FENCE, position: 5, events: [trade(5, 'a'), trade(4, 'b')] })),
    );
    invalid(() =>
      validatePlanShape(
        makePlan('c', {
          fence: FENCE,
          position: 5,
          events: [trade(4, 'a', {}, { ordinal: 2 }), trade(4, 'b', {}, { ordinal: 2, eventId: 'z' })],
        }),
      ),
    );
    invalid(() => validatePlanShape(makePlan('c', { fence: FENCE, position: 5, events: [trade(6, 'a')] })));
    invalid(() =>
      validatePlanShape(
        makePlan('c', { fence: FENCE, position: 5, quality: [{ scope: 's', state: 'ok', position: 6 }] }),
      ),
    );
    expect(() =>
      validatePlanShape(makePlan('c', { fence: FENCE, position: 5, events: [trade(4, 'a'), trade(5, 'b')] })),
    ).not.toThrow();
  });

  it('resume and rebind continue the saved journal; explicit starts only consume a decision or start fresh', () => {
    invalid(() => validatePlanAgainstSaved(makePlan('c', { fence: FENCE, position: 2 }), saved));
    invalid(() =>
      validatePlanAgainstSaved(makePlan('c', { fence: FENCE, position: 5, events: [trade(3, 'a')] }), saved),
    );
    invalid(() => validatePlanAgainstSaved(makePlan('c', { fence: FENCE, position: 5, generation: 2 }), saved));
    invalid(() =>
      validatePlanAgainstSaved(makePlan('c', { fence: FENCE, position: 5, generation: 3, startMode: 'rebind' }), saved),
    );
    expect(() =>
      validatePlanAgainstSaved(makePlan('c', { fence: FENCE, position: 5, generation: 2, startMode: 'rebind' }), saved),
    ).not.toThrow();
    // live_cut without a decision behaves like the session's continuation; with one it may go anywhere.
    invalid(() => validatePlanAgainstSaved(makePlan('c', { fence: FENCE, position: 1, startMode: 'live_cut' }), saved));
    expect(() =>
      validatePlanAgainstSaved(makePlan('c', { fence: FENCE, position: 1, startMode: 'live_cut' }), {
        ...saved,
        pendingStart: 'live_cut',
      }),
    ).not.toThrow();
    invalid(() =>
      validatePlanAgainstSaved(makePlan('c', { fence: FENCE, position: 1, startMode: 'live_cut' }), {
        ...saved,
        pendingStart: 'from_floor',
      }),
    );
    invalid(() =>
      validatePlanAgainstSaved(makePlan('c', { fence: FENCE, position: 5 }), { ...saved, pendingStart: 'from_floor' }),
    );
    invalid(() =>
      validatePlanAgainstSaved(makePlan('c', { fence: FENCE, position: 5 }), { ...saved, abandoned: true }),
    );
  });
});

// Random journals of trades and corrections over a few entities and markets, positions strictly increasing.
const journalArb = fc
  .array(
    fc.record({
      correction: fc.boolean(),
      entity: fc.integer({ min: 0, max: 5 }),
      revision: fc.integer({ min: 2, max: 4 }),
      market: fc.constantFrom('a', 'b'),
      price: fc.integer({ min: 0, max: 999 }).map((n) => formatDecimal({ units: BigInt(n), scale: 3 })),
      size: fc.integer({ min: 1, max: 99_999 }).map((n) => formatDecimal({ units: BigInt(n), scale: 2 })),
    }),
    { maxLength: 30 },
  )
  .map((drafts) =>
    drafts.map((d, i): StagedEvent => {
      const data = { market: d.market, price: d.price, size: d.size };
      return d.correction ? correction(i + 1, `e${d.entity}`, d.revision, data) : trade(i + 1, `e${d.entity}`, data);
    }),
  );

const planOf = (events: StagedEvent[], position: number) =>
  makePlan('c', { fence: FENCE, position, events, terminalReasons: ['unknown_correction_target'] });

function volumesAfter(existing: ExistingRows): Map<string, string> {
  const sums = new Map<string, Decimal>();
  for (const e of existing.executions.values())
    sums.set(e.market, addDecimal(sums.get(e.market) ?? { units: 0n, scale: 0 }, parseDecimal(e.notional)));
  return new Map([...sums].map(([m, d]) => [m, formatDecimal(d)]));
}

describe('decideCommit properties', () => {
  it('is idempotent: the same plan over its own result changes nothing', () => {
    fc.assert(
      fc.property(journalArb, (events) => {
        const first = committed(planOf(events, events.length));
        const again = committed(planOf(events, events.length), applied(empty(), first));
        expect(again.receipts).toEqual([]);
        expect(again.executions).toEqual([]);
        expect(again.marketDeltas).toEqual([]);
        expect(again.counts.duplicates).toBe(events.length);
      }),
    );
  });

  it('splitting a journal into checkpoints anywhere gives the same state as one checkpoint', () => {
    fc.assert(
      fc.property(journalArb, fc.nat(), (events, cutSeed) => {
        const cut = events.length === 0 ? 0 : cutSeed % (events.length + 1);
        const whole = applied(empty(), committed(planOf(events, events.length)));
        const firstHalf = applied(empty(), committed(planOf(events.slice(0, cut), cut)));
        const split = applied(firstHalf, committed(planOf(events.slice(cut), events.length), firstHalf));
        expect([...split.executions.entries()].sort()).toEqual([...whole.executions.entries()].sort());
        expect([...split.receipts.keys()].sort()).toEqual([...whole.receipts.keys()].sort());
      }),
    );
  });

  it('market deltas account exactly for the change of the executions’ notionals', () => {
    fc.assert(
      fc.property(journalArb, fc.nat(), (events, cutSeed) => {
        const cut = events.length === 0 ? 0 : cutSeed % (events.length + 1);
        const before = applied(empty(), committed(planOf(events.slice(0, cut), cut)));
        const writes = committed(planOf(events.slice(cut), events.length), before);
        const after = applied(before, writes);
        const expected = new Map<string, Decimal>();
        for (const [m, v] of volumesAfter(after)) expected.set(m, parseDecimal(v));
        for (const [m, v] of volumesAfter(before))
          expected.set(m, subDecimal(expected.get(m) ?? { units: 0n, scale: 0 }, parseDecimal(v)));
        const nonZero = [...expected].filter(([, d]) => d.units !== 0n).map(([m, d]) => [m, formatDecimal(d)]);
        const deltas = writes.marketDeltas
          .filter((d) => parseDecimal(d.volume).units !== 0n)
          .map((d) => [d.market, d.volume]);
        expect(deltas.sort()).toEqual(nonZero.sort());
        const newExecutions = after.executions.size - before.executions.size;
        expect(writes.marketDeltas.reduce((n, d) => n + d.count, 0)).toBe(newExecutions);
      }),
    );
  });
});
