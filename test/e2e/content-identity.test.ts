// Content identity end to end (docs/protocol.md §4): the same event delivered at another position is a
// duplicate, whether the journal repeats it further on in the same history or a rebuilt history renumbers it
// and an operator decides from_floor. Real Temporal dev server, real Postgres, the reference stream server.
import { describe, expect, it } from 'vitest';
import { addDecimal, formatDecimal, notional, parseDecimal, type Decimal } from '../../protocol/decimal.js';
import type { Journal } from '../../simulator/journal.js';
import { resolveGapUpdate } from '../../workflows/definitions.js';
import { appliedEvents } from '../db/reference-fold.js';
import { useTestDatabase } from '../support/db.js';
import { useResources } from '../support/leaks.js';
import {
  correction,
  journalOf,
  trade,
  waitForPhase,
  waitForStatus,
  withConsumerStack,
  within,
} from './consumer-harness.js';
import { expectReplayable } from './replay-check.js';

const db = useTestDatabase();

interface Effects {
  executions: { entity_id: string; revision: number; notional: string }[];
  volumes: { market: string; volume: string; execution_count: number }[];
}

async function savedEffects(consumerId: string): Promise<Effects> {
  const { rows: executions } = await db.pool.query<Effects['executions'][number]>(
    `SELECT entity_id, revision, trim_scale(notional)::text AS notional FROM executions
      WHERE consumer_id = $1 ORDER BY entity_id`,
    [consumerId],
  );
  const { rows: volumes } = await db.pool.query<Effects['volumes'][number]>(
    `SELECT market, trim_scale(volume)::text AS volume, execution_count FROM market_volumes
      WHERE consumer_id = $1 ORDER BY market`,
    [consumerId],
  );
  return { executions, volumes };
}

/** The reference fold of the journal as it stands: every event applied once, in journal order. */
function foldedEffects(journal: Journal): Effects {
  const events = [...journal.range(0, journal.head)].flatMap((t) => t.events);
  const state = new Map<string, { revision: number; market: string; notional: string }>();
  for (const e of appliedEvents(events)) {
    const data = e.data as { market: string; price: string; size: string };
    state.set(e.entityId, { revision: e.revision, market: data.market, notional: notional(data.price, data.size) });
  }
  const volumes = new Map<string, { volume: Decimal; count: number }>();
  for (const s of state.values()) {
    const v = volumes.get(s.market) ?? { volume: parseDecimal('0'), count: 0 };
    volumes.set(s.market, { volume: addDecimal(v.volume, parseDecimal(s.notional)), count: v.count + 1 });
  }
  return {
    executions: [...state]
      .sort(([a], [b]) => (a < b ? -1 : 1))
      .map(([entity_id, s]) => ({ entity_id, revision: s.revision, notional: s.notional })),
    volumes: [...volumes]
      .sort(([a], [b]) => (a < b ? -1 : 1))
      .map(([market, v]) => ({ market, volume: formatDecimal(v.volume), execution_count: v.count })),
  };
}

async function receiptPositions(consumerId: string): Promise<Record<string, number>> {
  const { rows } = await db.pool.query<{ event_id: string; position: string }>(
    'SELECT event_id, position FROM event_receipts WHERE consumer_id = $1',
    [consumerId],
  );
  return Object.fromEntries(rows.map((r) => [r.event_id, Number(r.position)]));
}

describe('content identity is what an event says, not where it was delivered', () => {
  const res = useResources();

  it('the identical event redelivered at another position of the same history: a duplicate, counted, no effect', async () => {
    const journal = journalOf([
      { events: [trade('d1', 'mA', '0.5', '2', { eventId: 'ev-d1' })] },
      { events: [trade('d2', 'mA', '0.5', '2', { eventId: 'ev-d2' })] },
      { events: [correction('d1', 'mA', 2, '0.5', '6')] },
    ]);
    await withConsumerStack(res, db, { journal }, async ({ server, startConsumer }) => {
      const handle = await startConsumer({ consumerId: 'redeliver-1' });
      await waitForStatus(handle, 'checkpoint 3 committed', (s) => s.committed?.position === 3);
      const before = await savedEffects('redeliver-1');
      expect(before).toEqual(foldedEffects(journal));

      // Position 4 repeats ev-d2 and ev-d1 verbatim (ordinals 1 and 2 there); position 5 is new.
      journal.redeliver(['ev-d2', 'ev-d1']);
      journal.append({ events: [trade('d3', 'mA', '0.25', '4', { eventId: 'ev-d3' })] });
      const status = await waitForStatus(handle, 'checkpoint 5 committed', (s) => s.committed?.position === 5);
      expect(status.counters.duplicates).toBe(2);
      await within(
        server.waitForAck((a) => a.consumerId === 'redeliver-1' && a.position === 5),
        60_000,
        'the ACK of checkpoint 5',
      );
    });
    const after = await savedEffects('redeliver-1');
    expect(after).toEqual({
      executions: [
        { entity_id: 'd1', revision: 2, notional: '3' },
        { entity_id: 'd2', revision: 1, notional: '1' },
        { entity_id: 'd3', revision: 1, notional: '1' },
      ],
      volumes: [{ market: 'mA', volume: '5', execution_count: 3 }],
    });
    // The receipts keep where each event was first applied.
    expect(await receiptPositions('redeliver-1')).toMatchObject({ 'ev-d1': 1, 'ev-d2': 2, 'ev-d3': 5 });
  });

  it('a rebuilt history reusing the eventIds at new positions: from_floor reaches the head with the effects of the fold', async () => {
    const journal = journalOf([
      { events: [trade('r1', 'mA', '0.5', '2'), trade('r2', 'mB', '0.4', '10')] },
      { events: [correction('r1', 'mA', 2, '0.5', '8')] },
      { events: [trade('r3', 'mA', '0.1', '10')] },
      { events: [correction('r2', 'mB', 2, '0.2', '10')] },
    ]);
    await withConsumerStack(res, db, { journal }, async ({ server, startConsumer }) => {
      const handle = await startConsumer({ consumerId: 'rebuilt-shift-1' });
      await waitForStatus(handle, 'checkpoint 4 committed', (s) => s.committed?.position === 4);
      const applied = await receiptPositions('rebuilt-shift-1');

      // The provider rebuilds its journal: same events and eventIds, at positions 11..14; then 15 is new.
      journal.rebuildHistory({ shift: 10 });
      const waiting = await waitForPhase(handle, 'awaiting_gap_decision');
      expect(waiting.stop?.reason).toContain('history_rebuilt');
      journal.append({ events: [correction('r3', 'mA', 2, '0.3', '10'), trade('r4', 'mB', '0.5', '4')] });
      expect(journal.head).toBe(15);

      await handle.executeUpdate(resolveGapUpdate, {
        args: [{ decision: 'from_floor', actor: 'ops', reason: 'provider rebuilt the journal' }],
      });
      const status = await waitForStatus(handle, 'checkpoint 15 committed', (s) => s.committed?.position === 15);
      // The five events of positions 11..14 met their receipts: duplicates, not conflicts.
      expect(status.counters.duplicates).toBe(5);
      expect(status.phase).toBe('streaming');
      await within(
        server.waitForAck((a) => a.consumerId === 'rebuilt-shift-1' && a.position === 15),
        60_000,
        'the ACK of checkpoint 15 in the rebuilt history',
      );
      expect(await savedEffects('rebuilt-shift-1')).toEqual(foldedEffects(journal));
      // Each event has one receipt; the replayed ones still name the position of the old history.
      const receipts = await receiptPositions('rebuilt-shift-1');
      expect(Object.keys(receipts)).toHaveLength(7);
      expect(receipts).toMatchObject(applied);
    });
  });

  it('replays every recorded history without nondeterminism and no history holds the API key', async () => {
    await expectReplayable();
  });
});
