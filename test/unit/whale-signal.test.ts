// The whale alert rule (docs/protocol.md section 9): only a fresh live delivery is a trading signal; replay,
// backfill, late observations and revisions of a whale change state exactly the same and are recorded as
// suppressed. Examples for each branch, and a property over random plans: delivery never changes the state a
// commit writes, and an alert goes out only for a live event.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decideCommit, noAlerts, type CommitWrites, type ExistingRows } from '../../domain/decide.js';
import { whaleSignal } from '../../domain/whale-signal.js';
import { parseExact } from '../../protocol/decimal.js';
import type { ActionRules, EventDelivery, StagedEvent } from '../../protocol/types.js';
import { correction, makePlan, stagedEvent, trade } from '../../bench/fixtures.js';

const FENCE = { leaseEpoch: 1, version: 0 };
const empty = (): ExistingRows => ({ receipts: new Map(), quarantine: new Map(), executions: new Map() });

function decide(events: StagedEvent[], rules: Partial<ActionRules> = {}): CommitWrites {
  const decision = decideCommit(
    makePlan('c', { fence: FENCE, position: 10, events, whaleAlertMinNotional: '50', alertRules: rules }),
    empty(),
  );
  if (decision.kind !== 'committed') throw new Error(`expected a commit, got ${decision.kind}`);
  return decision.writes;
}

const alerts = (writes: CommitWrites) =>
  writes.outbox.map((o) => [o.payload.entityId, o.suppressedReason ?? 'alert'] as const);

const whale = { price: '0.5', size: '200' }; // 100 ≥ 50
const minnow = { price: '0.1', size: '10' }; // 1

describe('whale alerts: live signals only', () => {
  it('alerts a live whale, records a replayed or backfilled one as suppressed, and writes nothing for a minnow', () => {
    const writes = decide([
      trade(1, 'live', whale),
      trade(2, 'replayed', whale, { delivery: 'replay' }),
      trade(3, 'backfilled', whale, { delivery: 'backfill' }),
      trade(4, 'minnow', minnow),
    ]);
    expect(alerts(writes)).toEqual([
      ['live', 'alert'],
      ['replayed', 'replay'],
      ['backfilled', 'backfill'],
    ]);
    expect(writes.outbox.map((o) => o.idempotencyKey)).toEqual([
      'whale_alert:ev-1-1',
      'whale_alert:ev-2-1',
      'whale_alert:ev-3-1',
    ]);
    expect(writes.counts.alerts).toEqual({
      queued: 1,
      suppressed: { ...noAlerts().suppressed, replay: 1, backfill: 1 },
    });
    // The payload says how and when the event arrived, so a receiver (or an audit) can tell.
    expect(writes.outbox[0]!.payload).toMatchObject({ delivery: 'live', observedAt: '2026-11-29T12:00:00.000Z' });
  });

  it('suppresses a live event observed longer ago than the bound, and an unreadable observation time', () => {
    const at = (observedAt: string, receivedAt: number, entityId: string): StagedEvent => ({
      ...trade(1, entityId, whale),
      observedAt,
      receivedAt,
    });
    const observed = Date.parse('2026-12-01T10:00:00.000Z');
    const events = [
      at('2026-12-01T10:00:00.000Z', observed + 300_000, 'at-bound'),
      at('2026-12-01T10:00:00.000Z', observed + 300_001, 'late'),
      at('yesterday-ish', observed, 'unreadable'),
    ].map((e, i) => ({ ...e, position: i + 1, eventId: `ev-${i}` }));
    expect(alerts(decide(events, { whaleAlertMaxAgeMs: 300_000 }))).toEqual([
      ['at-bound', 'alert'],
      ['late', 'late'],
      ['unreadable', 'late'],
    ]);
    // No bound: every live whale alerts.
    expect(alerts(decide(events, { whaleAlertMaxAgeMs: null })).map(([, signal]) => signal)).toEqual([
      'alert',
      'alert',
      'alert',
    ]);
  });

  it('alerts a correction only when it crosses the threshold; a revised whale is not a new signal', () => {
    const writes = decide([
      trade(1, 'grows', minnow),
      trade(2, 'revised', whale),
      trade(3, 'shrinks', whale),
      correction(4, 'grows', 2, whale),
      correction(5, 'revised', 2, { price: '0.6', size: '200' }),
      correction(6, 'shrinks', 2, minnow),
    ]);
    expect(alerts(writes)).toEqual([
      ['revised', 'alert'],
      ['shrinks', 'alert'],
      ['grows', 'alert'],
      ['revised', 'correction'],
    ]);
  });

  it('WHALE_ALERT_ON_REPLAY sends history as if live, whatever its age', () => {
    const old = { ...trade(1, 'old', whale, { delivery: 'replay' }), receivedAt: Date.now() };
    const backfilled = { ...trade(2, 'backfilled', whale, { delivery: 'backfill' }), receivedAt: Date.now() };
    expect(alerts(decide([old, backfilled], { whaleAlertOnReplay: true }))).toEqual([
      ['old', 'alert'],
      ['backfilled', 'alert'],
    ]);
  });

  it('whaleSignal: below the threshold is no whale whatever the delivery', () => {
    const rules = { threshold: parseExact('50'), whaleAlertMaxAgeMs: null, whaleAlertOnReplay: true };
    for (const delivery of ['live', 'replay', 'backfill'] as const) {
      const event = { delivery, receivedAt: 0, observedAt: '1970-01-01T00:00:00.000Z' };
      expect(whaleSignal(event, null, parseExact('49.99'), rules)).toBeNull();
      expect(whaleSignal(event, parseExact('10'), parseExact('49.99'), rules)).toBeNull();
    }
  });

  it('property: delivery changes only whether a whale alerts, never the state a commit writes', () => {
    const deliveries: EventDelivery[] = ['live', 'replay', 'backfill'];
    const draft = fc.record({
      entity: fc.integer({ min: 0, max: 5 }),
      correct: fc.boolean(),
      price: fc.integer({ min: 1, max: 99 }).map((p) => `0.${String(p).padStart(2, '0')}`),
      size: fc.integer({ min: 1, max: 400 }).map(String),
      delivery: fc.constantFrom(...deliveries),
      ageMs: fc.integer({ min: 0, max: 600_000 }),
    });
    fc.assert(
      fc.property(fc.array(draft, { minLength: 1, maxLength: 30 }), fc.boolean(), (drafts, onReplay) => {
        // entity -> its current revision: a correction revises a traded entity; a second trade of one is no effect
        const revisions = new Map<number, number>();
        const events = drafts.map((d, i): StagedEvent => {
          const current = revisions.get(d.entity);
          const isCorrection = d.correct && current !== undefined;
          const revision = isCorrection ? current + 1 : 1;
          if (isCorrection || current === undefined) revisions.set(d.entity, revision);
          const base = stagedEvent({
            position: i + 1,
            kind: isCorrection ? 'correction' : 'trade',
            entityId: `x-${d.entity}`,
            revision,
            data: { ...trade(1, 'x').data, price: d.price, size: d.size },
            delivery: d.delivery,
          });
          return { ...base, receivedAt: Date.parse(base.observedAt) + d.ageMs };
        });
        const rules = { whaleAlertMaxAgeMs: 300_000, whaleAlertOnReplay: onReplay };
        const writes = decide(events, rules);
        const asLive = decide(
          events.map((e) => ({ ...e, delivery: 'live' as const })),
          rules,
        );
        const { outbox, counts, ...state } = writes;
        const { outbox: liveOutbox, counts: liveCounts, ...liveState } = asLive;
        expect(state).toEqual(liveState);
        expect({ ...counts, alerts: null }).toEqual({ ...liveCounts, alerts: null });
        // The same whales are recorded, under the same keys; only a live one (or any, on replay) is sent.
        expect(outbox.map((o) => o.idempotencyKey)).toEqual(liveOutbox.map((o) => o.idempotencyKey));
        const byEvent = new Map(events.map((e) => [e.eventId, e]));
        for (const row of outbox) {
          const event = byEvent.get(row.eventId)!;
          if (row.suppressedReason === null) expect(event.delivery === 'live' || onReplay).toBe(true);
          if (event.delivery !== 'live' && !onReplay)
            expect(['replay', 'backfill', 'correction']).toContain(row.suppressedReason);
        }
      }),
      { numRuns: 200 },
    );
  });
});
