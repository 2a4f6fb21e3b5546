// The upgrade to content identity over (kind, entityId, revision, data) (docs/protocol.md §4), on a real
// Postgres. The receipts and quarantine records are written the way the previous release wrote them (its content
// hash included the position and ordinal) through the same commit; the current code then meets them: what was a
// duplicate stays one wherever it is redelivered, and what was a conflict stays one. No migration rewrites them:
// receipts do not keep the event data, so a legacy hash is compared where it is met.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  acquireLease,
  commitCheckpoint,
  loadCommitted,
  recordGapDecision,
  resolveQuarantine,
  type CheckpointOutcome,
} from '../../db/index.js';
import { contentHashOf } from '../../db/content-hash-column.js';
import { commitPageChunk, openPageProgress, recognisePageEvents } from '../../db/pages.js';
import { CONTENT_IDENTITY_PREFIX, legacyEventContentHash } from '../../protocol/canonical.js';
import type { StagedEvent } from '../../protocol/types.js';
import { committed, correction, makePlan, trade, type PlanOptions } from '../../bench/fixtures.js';
import { useTestDatabase } from '../support/db.js';
import { dumpState } from './state-dump.js';
import { NO_ACTIONS } from '../../protocol/types.js';

const db = useTestDatabase();

type Fence = { leaseEpoch: number; version: number };

/** The event as the previous release staged it: its content hash covered the position and ordinal too. */
const asReleased = (event: StagedEvent): StagedEvent => ({
  ...event,
  contentHash: legacyEventContentHash(event, event.position, event.ordinal),
});

async function savedHashes(table: 'event_receipts' | 'quarantine', consumerId: string): Promise<string[]> {
  const { rows } = await db.pool.query<{ content_hash: Buffer }>(
    `SELECT content_hash FROM ${table} WHERE consumer_id = $1 ORDER BY event_id`,
    [consumerId],
  );
  return rows.map((r) => contentHashOf(r.content_hash));
}

async function fenceOf(consumerId: string): Promise<Fence> {
  const saved = (await loadCommitted(db.pool, consumerId))!;
  return { leaseEpoch: saved.leaseEpoch, version: saved.version };
}

/** A stream consumer whose first checkpoint (an explicit from_floor start) committed `events` at `position`. */
async function releasedConsumer(position: number, events: StagedEvent[]): Promise<string> {
  const consumerId = `c-${randomUUID()}`;
  const lease = await acquireLease(db.pool, consumerId);
  const fence = { leaseEpoch: lease.leaseEpoch, version: lease.version };
  committed(
    await commitCheckpoint(db.pool, makePlan(consumerId, { fence, position, events, startMode: 'from_floor' })),
  );
  return consumerId;
}

async function decideFromFloor(consumerId: string): Promise<void> {
  await recordGapDecision(db.pool, { consumerId, decision: 'from_floor', actor: 'op', reason: 'rebuilt history' });
}

/** A plan over the saved fence. */
async function commitNext(consumerId: string, options: Omit<PlanOptions, 'fence'>): Promise<CheckpointOutcome> {
  return commitCheckpoint(db.pool, makePlan(consumerId, { ...options, fence: await fenceOf(consumerId) }));
}

describe('receipts saved under the legacy content hash', () => {
  const tradeA = (position: number, ordinal = 1, data = {}) =>
    trade(position, 'e-1', data, { eventId: 'ev-A', ordinal });
  const tradeB = (position: number, ordinal = 2) => trade(position, 'e-2', {}, { eventId: 'ev-B', ordinal });

  it('the same event at the same or another position is a duplicate; other content is a conflict', async () => {
    const consumerId = await releasedConsumer(4, [asReleased(tradeA(3)), asReleased(tradeB(4))]);
    const legacy = await savedHashes('event_receipts', consumerId);
    expect(legacy).toHaveLength(2);
    for (const hash of legacy) expect(hash).toMatch(/^[0-9a-f]{64}$/);
    const effects = await dumpState(db.pool, consumerId);

    // Replayed at the very same positions (an operator's from_floor over an unchanged history).
    await decideFromFloor(consumerId);
    expect(
      await commitNext(consumerId, { position: 4, events: [tradeA(3), tradeB(4)], startMode: 'from_floor' }),
    ).toMatchObject({ kind: 'committed', applied: 0, duplicates: 2, noEffect: 0 });
    // Redelivered at other positions and ordinals (an overlapping redelivery further on in the same history).
    expect(await commitNext(consumerId, { position: 11, events: [tradeB(10, 1), tradeA(11, 3)] })).toMatchObject({
      kind: 'committed',
      position: 11,
      applied: 0,
      duplicates: 2,
    });
    const afterDuplicates = await dumpState(db.pool, consumerId);
    expect({ ...afterDuplicates, checkpoint: null }).toEqual({ ...effects, checkpoint: null });
    // The receipts are not rewritten: they keep the hash and the position where the event was first applied.
    expect(await savedHashes('event_receipts', consumerId)).toEqual(legacy);

    // Same eventId, other content: a conflict at another position and at the saved one. Nothing of the
    // checkpoint is committed: not its effects, not its position or version.
    const conflicting = [
      { position: 13, events: [trade(12, 'e-3'), tradeA(13, 1, { size: '101' })] },
      { position: 11, events: [tradeA(3, 1, { price: '0.9' })], startMode: 'from_floor' as const },
    ];
    for (const options of conflicting) {
      if (options.startMode) await decideFromFloor(consumerId);
      const before = await dumpState(db.pool, consumerId);
      expect(await commitNext(consumerId, options)).toMatchObject({
        kind: 'conflict',
        eventId: 'ev-A',
        savedHash: legacy[0],
      });
      expect(await dumpState(db.pool, consumerId)).toEqual(before);
    }
  });

  it('a held quarantine record under the legacy hash still matches its event, at its position or another', async () => {
    const ghost = (position: number, revision = 2) => correction(position, 'ghost', revision, {}, { eventId: 'ev-G' });
    const consumerId = await releasedConsumer(3, [asReleased(trade(3, 'e-1'))]);
    expect(await commitNext(consumerId, { position: 4, events: [asReleased(ghost(4))] })).toMatchObject({
      kind: 'held_quarantine',
    });
    const [legacy] = await savedHashes('quarantine', consumerId);
    expect(legacy).toMatch(/^[0-9a-f]{64}$/);

    // The current code meets the same event: still held (not a conflict), at its position and at another.
    for (const position of [4, 6])
      expect(await commitNext(consumerId, { position, events: [ghost(position)] })).toMatchObject({
        kind: 'held_quarantine',
        items: [{ eventId: 'ev-G' }],
      });
    expect(await commitNext(consumerId, { position: 7, events: [ghost(7, 3)] })).toMatchObject({
      kind: 'conflict',
      eventId: 'ev-G',
      savedHash: legacy,
    });

    await resolveQuarantine(db.pool, { consumerId, decision: 'release_terminal', actor: 'op', reason: 'upstream bug' });
    expect(await commitNext(consumerId, { position: 6, events: [ghost(6)] })).toMatchObject({
      kind: 'committed',
      quarantined: 1,
    });
    const state = await dumpState(db.pool, consumerId);
    expect(state.quarantine).toEqual([
      { eventId: 'ev-G', disposition: 'terminal', reason: 'unknown_correction_target' },
    ]);
    expect(state.executions.map((e) => e.entityId)).toEqual(['e-1']);
    // The new receipt is written under the current identity.
    expect((await savedHashes('event_receipts', consumerId)).map((h) => h.startsWith(CONTENT_IDENTITY_PREFIX))).toEqual(
      [false, true],
    );
  });

  it('the page source recognises its durable prefix under the legacy hash, and finds a conflict', async () => {
    const consumerId = `p-${randomUUID()}`;
    const opened = await openPageProgress(db.pool, { consumerId, stream: 'polymarket', filter: {} });
    expect(opened.kind).toBe('opened');
    const chunk = await commitPageChunk(db.pool, {
      consumerId,
      expectedVersion: opened.progress!.version,
      events: [asReleased(tradeA(3)), asReleased(tradeB(4))],
      quarantinePolicy: { terminalReasons: [] },
      actions: NO_ACTIONS,
    });
    expect(chunk).toMatchObject({ kind: 'committed', appliedPosition: 4 });

    expect(await recognisePageEvents(db.pool, consumerId, [tradeA(3), tradeB(4)])).toEqual({
      kind: 'recognised',
      count: 2,
    });
    expect(await recognisePageEvents(db.pool, consumerId, [tradeB(1, 1), tradeA(2, 4)])).toEqual({
      kind: 'recognised',
      count: 2,
    });
    expect(await recognisePageEvents(db.pool, consumerId, [tradeA(3, 1, { size: '101' })])).toMatchObject({
      kind: 'conflict',
      eventId: 'ev-A',
    });
  });
});
