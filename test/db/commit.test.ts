// The acceptance oracles of docs/protocol.md §7 that the database decides, on a real Postgres.
import { randomUUID } from 'node:crypto';
import { readdirSync } from 'node:fs';
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import {
  acquireLease,
  commitCheckpoint,
  commitCheckpoints,
  consumerSummary,
  listQuarantine,
  loadCommitted,
  migrate,
  MIGRATIONS_FOLDER,
  RecentExecutions,
  recordGapDecision,
  resolveQuarantine,
  SQLSTATE,
  StorageFailure,
  type CheckpointOutcome,
} from '../../db/index.js';
import { InvalidPlan } from '../../domain/errors.js';
import type { CheckpointPlan } from '../../protocol/types.js';
import { createTestDatabase, useTestDatabase } from '../support/db.js';
import {
  committed,
  correction,
  makePlan,
  stagedEvent,
  trade,
  tradeData,
  type PlanOptions,
} from '../../bench/fixtures.js';
import { dumpState } from './state-dump.js';

const db = useTestDatabase();

type Fence = { leaseEpoch: number; version: number };

/** A consumer whose first checkpoint (explicit from_floor start) is committed at `position`. */
async function startConsumer(
  position: number,
  events: PlanOptions['events'] = [],
): Promise<{ consumerId: string; fence: Fence }> {
  const consumerId = `c-${randomUUID()}`;
  const lease = await acquireLease(db.pool, consumerId);
  const result = await commitCheckpoint(
    db.pool,
    makePlan(consumerId, {
      fence: { leaseEpoch: lease.leaseEpoch, version: lease.version },
      position,
      events,
      startMode: 'from_floor',
    }),
  );
  return { consumerId, fence: { leaseEpoch: lease.leaseEpoch, version: committed(result).version } };
}

const next = (fence: Fence, result: CheckpointOutcome): Fence => ({
  leaseEpoch: fence.leaseEpoch,
  version: committed(result).version,
});

describe('first start', () => {
  it('creates the consumer on acquireLease and commits an explicit first start', async () => {
    const consumerId = `c-${randomUUID()}`;
    expect(await loadCommitted(db.pool, consumerId)).toBeNull();
    const lease = await acquireLease(db.pool, consumerId);
    expect(lease).toMatchObject({
      leaseEpoch: 1,
      version: 0,
      position: null,
      token: null,
      binding: null,
      updatedAt: null,
    });

    const token = `opaque-${'x'.repeat(5000)}`; // stored whole, never truncated
    const result = await commitCheckpoint(
      db.pool,
      makePlan(consumerId, { fence: { leaseEpoch: 1, version: 0 }, position: 3, startMode: 'live_cut', token }),
    );
    expect(result).toMatchObject({ version: 1, position: 3, applied: 0 });
    const state = await loadCommitted(db.pool, consumerId);
    expect(state).toMatchObject({ position: 3, token, generation: 1, version: 1, leaseEpoch: 1, pendingStart: null });
    expect(state?.binding).toMatchObject({ subscriptionId: `sub-${consumerId}`, generation: 1, historyId: 'hist-1' });
  });

  it('refuses a resume plan when nothing was ever committed', async () => {
    const consumerId = `c-${randomUUID()}`;
    await acquireLease(db.pool, consumerId);
    await expect(
      commitCheckpoint(db.pool, makePlan(consumerId, { fence: { leaseEpoch: 1, version: 0 }, position: 3 })),
    ).rejects.toBeInstanceOf(InvalidPlan);
  });
});

describe('crash before commit', () => {
  it('leaves C=3 and no effect when the transaction fails inside; redelivery then applies once', async () => {
    const { consumerId, fence } = await startConsumer(3, [trade(2, 'e-1')]);
    // A trigger that raises on the checkpoint UPDATE: the last statement of the commit, after every effect
    // row of the transaction has been written, so the failure proves they all roll back together.
    await db.pool.query(`
      CREATE OR REPLACE FUNCTION fail_checkpoint_4() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.consumer_id = '${consumerId}' AND NEW.position = 4 THEN RAISE EXCEPTION 'injected crash before commit'; END IF;
        RETURN NEW;
      END $$;
      CREATE TRIGGER fail_checkpoint_4 BEFORE UPDATE ON checkpoints FOR EACH ROW EXECUTE FUNCTION fail_checkpoint_4();`);
    const before = await dumpState(db.pool, consumerId);
    const plan = makePlan(consumerId, {
      fence,
      position: 4,
      events: [trade(4, 'e-2', { price: '0.25', size: '40' })],
      whaleAlertMinNotional: '1',
    });

    const failure = await commitCheckpoint(db.pool, plan).catch((e: unknown) => e);
    expect(failure).toBeInstanceOf(StorageFailure);
    expect((failure as StorageFailure).sqlState).toBe(SQLSTATE.raiseException);
    expect((failure as StorageFailure).cause).toBeInstanceOf(Error);
    expect(await dumpState(db.pool, consumerId)).toEqual(before);

    await db.pool.query('DROP TRIGGER fail_checkpoint_4 ON checkpoints; DROP FUNCTION fail_checkpoint_4();');
    const result = await commitCheckpoint(db.pool, plan);
    expect(result).toMatchObject({ position: 4, applied: 1, outboxed: 1 });
    const after = await dumpState(db.pool, consumerId);
    expect(after.checkpoint?.position).toBe(4);
    expect(after.executions.map((e) => e.entityId)).toEqual(['e-1', 'e-2']);
    expect(after.volumes).toEqual({ 'm-1': '60/2' });
  });
});

describe('commit before ACK (lost ACK)', () => {
  it('keeps C=4 and one effect; a recommit of the same checkpoint is fenced and a new attempt resumes after 4', async () => {
    const { consumerId, fence } = await startConsumer(3);
    const plan = makePlan(consumerId, { fence, position: 4, events: [trade(4, 'e-1')] });
    committed(await commitCheckpoint(db.pool, plan));
    const saved = await dumpState(db.pool, consumerId);

    // The same attempt retrying its commit (it never saw the result): the version moved, so it is fenced.
    expect(await commitCheckpoint(db.pool, plan)).toMatchObject({ kind: 'fenced' });
    expect(await dumpState(db.pool, consumerId)).toEqual(saved);

    // A new attempt resumes from the saved token, whatever the server's ACK state.
    const lease = await acquireLease(db.pool, consumerId);
    expect(lease).toMatchObject({ position: 4, token: 'tok:1:4', leaseEpoch: fence.leaseEpoch + 1 });
    // The server redelivering 4 to a resume is a plan error, never a second effect.
    const redelivered = makePlan(consumerId, {
      fence: { leaseEpoch: lease.leaseEpoch, version: lease.version },
      position: 4,
      events: [trade(4, 'e-1')],
    });
    await expect(commitCheckpoint(db.pool, redelivered)).rejects.toBeInstanceOf(InvalidPlan);
    expect((await dumpState(db.pool, consumerId)).executions).toHaveLength(1);
    expect((await dumpState(db.pool, consumerId)).volumes).toEqual({ 'm-1': '50/1' });
  });
});

describe('duplicate and conflict', () => {
  it('a duplicate adds no effect; the same eventId with different content aborts the whole checkpoint', async () => {
    const first = trade(4, 'e-1', {}, { eventId: 'ev-A' });
    const { consumerId, fence } = await startConsumer(4, [first]);

    // Identical event twice within one plan (and once already saved): one effect.
    const replay = makePlan(consumerId, { fence: { ...fence }, position: 4, events: [first], startMode: 'from_floor' });
    await recordGapDecision(db.pool, { consumerId, decision: 'from_floor', actor: 'op', reason: 'replay' });
    const afterDecision = (await loadCommitted(db.pool, consumerId))!;
    const result = await commitCheckpoint(db.pool, {
      ...replay,
      fence: { leaseEpoch: afterDecision.leaseEpoch, version: afterDecision.version },
    });
    expect(result).toMatchObject({ applied: 0, duplicates: 1 });
    const saved = await dumpState(db.pool, consumerId);
    expect(saved.volumes).toEqual({ 'm-1': '50/1' });

    const conflicting = trade(5, 'e-9', { price: '0.9' }, { eventId: 'ev-A' });
    const plan = makePlan(consumerId, {
      fence: next(fence, result),
      position: 6,
      events: [trade(5, 'e-2', {}, { ordinal: 1 }), { ...conflicting, ordinal: 2 }],
    });
    expect(await commitCheckpoint(db.pool, plan)).toEqual({
      kind: 'conflict',
      eventId: 'ev-A',
      savedHash: first.contentHash,
      incomingHash: conflicting.contentHash,
    });
    expect(await dumpState(db.pool, consumerId)).toEqual(saved);
  });

  it('the identical event redelivered at another position of the same history is a duplicate: no effect, counted', async () => {
    const first = trade(4, 'e-1', {}, { eventId: 'ev-A' });
    const { consumerId, fence } = await startConsumer(4, [first]);
    const before = await dumpState(db.pool, consumerId);
    const redelivered = { ...first, position: 7, ordinal: 2, observedAt: '2027-01-01T00:00:00.000Z' };
    const result = await commitCheckpoint(
      db.pool,
      makePlan(consumerId, { fence, position: 7, events: [trade(7, 'e-2', {}, { ordinal: 1 }), redelivered] }),
    );
    expect(result).toMatchObject({ kind: 'committed', position: 7, applied: 1, duplicates: 1 });
    const after = await dumpState(db.pool, consumerId);
    expect(after.executions.map((e) => e.entityId)).toEqual(['e-1', 'e-2']);
    expect(after.volumes).toEqual({ 'm-1': '100/2' });
    expect(after.receipts).toEqual([{ eventId: 'ev-7-1', outcome: 'applied' }, ...before.receipts]);
    // The receipt keeps where the event was first applied.
    const { rows } = await db.pool.query<{ position: string; ordinal: number }>(
      'SELECT position, ordinal FROM event_receipts WHERE consumer_id = $1 AND event_id = $2',
      [consumerId, 'ev-A'],
    );
    expect(rows).toEqual([{ position: '4', ordinal: 1 }]);
  });

  it('the same eventId twice with different content within one plan is a conflict', async () => {
    const { consumerId, fence } = await startConsumer(3);
    const a = trade(4, 'e-1', {}, { eventId: 'dup' });
    const b = trade(5, 'e-2', {}, { eventId: 'dup' });
    expect(await commitCheckpoint(db.pool, makePlan(consumerId, { fence, position: 5, events: [a, b] }))).toMatchObject(
      { kind: 'conflict', eventId: 'dup' },
    );
    expect((await dumpState(db.pool, consumerId)).checkpoint?.position).toBe(3);
  });
});

describe('zero matches', () => {
  it('a checkpoint with no events advances C and changes no effect', async () => {
    const { consumerId, fence } = await startConsumer(1, [trade(1, 'e-1')]);
    const before = await dumpState(db.pool, consumerId);
    const result = await commitCheckpoint(db.pool, makePlan(consumerId, { fence, position: 5 }));
    expect(result).toMatchObject({ position: 5, applied: 0, duplicates: 0, noEffect: 0, version: fence.version + 1 });
    const after = await dumpState(db.pool, consumerId);
    expect(after.checkpoint).toMatchObject({ position: 5, token: 'tok:1:5' });
    expect({ ...after, checkpoint: null }).toEqual({ ...before, checkpoint: null });
  });
});

describe('correction', () => {
  it('revision 2 of a known entity replaces its state; volume changes by the difference, count unchanged', async () => {
    const { consumerId, fence } = await startConsumer(4, [trade(4, 'e-1', { price: '0.5', size: '100' })]);
    const result = await commitCheckpoint(
      db.pool,
      makePlan(consumerId, { fence, position: 5, events: [correction(5, 'e-1', 2, { price: '0.61', size: '100' })] }),
    );
    expect(result).toMatchObject({ applied: 1 });
    let state = await dumpState(db.pool, consumerId);
    expect(state.executions).toEqual([
      { entityId: 'e-1', revision: 2, market: 'm-1', price: '0.61', size: '100', notional: '61' },
    ]);
    expect(state.volumes).toEqual({ 'm-1': '61/1' });
    expect(state.revisions.map((r) => [r.revision, r.notional])).toEqual([
      [1, '50'],
      [2, '61'],
    ]);

    // At or below the saved revision: no effect, but a receipt; a market change moves volume and count.
    const r2 = await commitCheckpoint(
      db.pool,
      makePlan(consumerId, {
        fence: next(fence, result),
        position: 7,
        events: [
          correction(6, 'e-1', 2, { price: '0.99' }),
          correction(7, 'e-1', 3, { market: 'm-2', price: '0.1', size: '10' }),
        ],
      }),
    );
    expect(r2).toMatchObject({ applied: 1, noEffect: 1 });
    state = await dumpState(db.pool, consumerId);
    expect(state.volumes).toEqual({ 'm-2': '1/1' });
    expect(state.receipts.map((r) => r.outcome).sort()).toEqual(['applied', 'applied', 'applied', 'no_effect']);
  });

  it('a trade and its correction in the same checkpoint see each other', async () => {
    const { consumerId, fence } = await startConsumer(3);
    const result = await commitCheckpoint(
      db.pool,
      makePlan(consumerId, {
        fence,
        position: 4,
        events: [
          trade(4, 'e-1', { size: '10' }, { ordinal: 1 }),
          correction(4, 'e-1', 2, { size: '12.5' }, { ordinal: 2 }),
        ],
      }),
    );
    expect(result).toMatchObject({ applied: 2 });
    const state = await dumpState(db.pool, consumerId);
    expect(state.volumes).toEqual({ 'm-1': '6.25/1' });
    expect(state.executions[0]).toMatchObject({ revision: 2, size: '12.5' });
  });
});

describe('missing correction target and unsupported kinds', () => {
  it('holds the checkpoint until release_terminal; no execution is fabricated', async () => {
    const { consumerId, fence } = await startConsumer(3);
    const orphan = correction(4, 'never-seen', 2);
    const plan = makePlan(consumerId, { fence, position: 5, events: [orphan, trade(5, 'e-1')] });

    expect(await commitCheckpoint(db.pool, plan)).toEqual({
      kind: 'held_quarantine',
      items: [
        {
          eventId: orphan.eventId,
          entityId: 'never-seen',
          kind: 'correction',
          position: 4,
          reason: 'unknown_correction_target',
        },
      ],
    });
    let state = await dumpState(db.pool, consumerId);
    expect(state.checkpoint?.position).toBe(3);
    expect(state.executions).toEqual([]);
    expect(state.quarantine).toEqual([
      { eventId: orphan.eventId, disposition: 'held', reason: 'unknown_correction_target' },
    ]);

    // Redelivered without a decision: still held, nothing else changes.
    expect(await commitCheckpoint(db.pool, plan)).toMatchObject({ kind: 'held_quarantine' });
    expect((await consumerSummary(db.pool, consumerId))?.heldQuarantine).toBe(1);

    expect(
      await resolveQuarantine(db.pool, {
        consumerId,
        decision: 'release_terminal',
        actor: 'ops@example',
        reason: 'upstream bug',
      }),
    ).toBe(1);
    const [record] = await listQuarantine(db.pool, consumerId);
    expect(record).toMatchObject({ disposition: 'terminal', decidedBy: 'ops@example', why: 'upstream bug' });

    const result = await commitCheckpoint(db.pool, plan);
    expect(result).toMatchObject({ position: 5, applied: 1, quarantined: 1 });
    state = await dumpState(db.pool, consumerId);
    expect(state.executions.map((e) => e.entityId)).toEqual(['e-1']);
    expect(state.receipts.find((r) => r.eventId === orphan.eventId)?.outcome).toBe('quarantined');
    const summary = await consumerSummary(db.pool, consumerId);
    expect(summary).toMatchObject({
      heldQuarantine: 0,
      executions: 1,
      totalVolume: '50',
      lastDecision: { kind: 'quarantine', decision: 'release_terminal' },
    });
  });

  it('retry applies again and holds again while still impossible; a terminal policy goes on at once', async () => {
    const { consumerId, fence } = await startConsumer(3);
    const odd = stagedEvent({ position: 4, kind: 'liquidation', entityId: 'x-1', data: { any: 'thing' } });
    const plan = makePlan(consumerId, { fence, position: 4, events: [odd] });
    expect(await commitCheckpoint(db.pool, plan)).toMatchObject({ kind: 'held_quarantine' });
    expect(
      await resolveQuarantine(db.pool, {
        consumerId,
        eventIds: [odd.eventId],
        decision: 'retry',
        actor: 'op',
        reason: 'after upgrade',
      }),
    ).toBe(1);
    expect((await listQuarantine(db.pool, consumerId))[0]?.disposition).toBe('retry');
    expect(await commitCheckpoint(db.pool, plan)).toMatchObject({ kind: 'held_quarantine' });
    expect((await listQuarantine(db.pool, consumerId, { disposition: 'held' })).map((r) => r.reason)).toEqual([
      'unsupported_kind',
    ]);

    const result = await commitCheckpoint(db.pool, {
      ...plan,
      quarantinePolicy: { terminalReasons: ['unsupported_kind'] },
    });
    expect(result).toMatchObject({ position: 4, quarantined: 1 });
    expect((await listQuarantine(db.pool, consumerId))[0]?.disposition).toBe('terminal');
  });
});

describe('rebind', () => {
  it('switches to generation 2 with the new filter; generation 1 plans are refused afterwards', async () => {
    const { consumerId, fence } = await startConsumer(1, [trade(1, 'e-1')]);
    await expect(
      commitCheckpoint(db.pool, makePlan(consumerId, { fence, position: 2, generation: 3, startMode: 'rebind' })),
    ).rejects.toBeInstanceOf(InvalidPlan);

    const filter = { kinds: ['trade'], markets: ['m-2'] };
    const rebind = makePlan(consumerId, {
      fence,
      position: 2,
      generation: 2,
      startMode: 'rebind',
      filter,
      events: [trade(2, 'e-2', { market: 'm-2' })],
    });
    const result = await commitCheckpoint(db.pool, rebind);
    const state = await loadCommitted(db.pool, consumerId);
    expect(state).toMatchObject({ generation: 2, position: 2 });
    expect(state?.binding).toMatchObject({ generation: 2, filter, filterHash: rebind.binding.filterHash });

    // The rebind session's later checkpoints stay at generation 2; generation 1 is over.
    const later = await commitCheckpoint(
      db.pool,
      makePlan(consumerId, { fence: next(fence, result), position: 3, generation: 2, startMode: 'rebind', filter }),
    );
    await expect(
      commitCheckpoint(db.pool, makePlan(consumerId, { fence: next(fence, later), position: 4, generation: 1 })),
    ).rejects.toBeInstanceOf(InvalidPlan);
    expect((await dumpState(db.pool, consumerId)).volumes).toEqual({ 'm-1': '50/1', 'm-2': '50/1' });
  });
});

describe('source quality', () => {
  it('an older notice never overwrites newer state; the cut snapshot at lastPosition changes nothing', async () => {
    const { consumerId, fence } = await startConsumer(3);
    const r1 = await commitCheckpoint(
      db.pool,
      makePlan(consumerId, {
        fence,
        position: 10,
        quality: [
          { scope: 'trades', state: 'ok', position: 4 },
          { scope: 'trades', state: 'degraded', position: 10 },
        ],
      }),
    );
    expect(committed(r1).qualityUpdated).toBe(1);
    const r2 = await commitCheckpoint(
      db.pool,
      makePlan(consumerId, {
        fence: next(fence, r1),
        position: 12,
        quality: [
          { scope: 'trades', state: 'ok', position: 8 }, // an older replay notice
          { scope: 'trades', state: 'gap', position: 10 }, // the snapshot at the saved lastPosition
          { scope: 'books', state: 'gap', position: 12 },
        ],
      }),
    );
    expect(committed(r2).qualityUpdated).toBe(1);
    expect((await dumpState(db.pool, consumerId)).quality).toEqual({ books: 'gap@12', trades: 'degraded@10' });
  });
});

describe('overlapping redelivery', () => {
  it('replayed events already applied are recognised; only the new ones apply, once', async () => {
    // Saved C7 with 104 and 105 applied; an explicit replay (e.g. from_floor) delivers 104..107.
    const applied = [trade(104, 'e-104'), trade(105, 'e-105')];
    const { consumerId } = await startConsumer(105, applied);
    const decided = await recordGapDecision(db.pool, {
      consumerId,
      decision: 'from_floor',
      actor: 'op',
      reason: 'cursor expired',
    });
    expect(decided).toMatchObject({ pendingStart: 'from_floor', token: 'tok:1:105' });
    const fence = { leaseEpoch: decided.leaseEpoch, version: decided.version };
    const page = makePlan(consumerId, {
      fence,
      position: 107,
      startMode: 'from_floor',
      events: [...applied, trade(106, 'e-106'), trade(107, 'e-107')],
    });
    const result = await commitCheckpoint(db.pool, page);
    expect(result).toMatchObject({ applied: 2, duplicates: 2, position: 107 });
    const state = await dumpState(db.pool, consumerId);
    expect(state.volumes).toEqual({ 'm-1': '200/4' });
    expect((await loadCommitted(db.pool, consumerId))?.pendingStart).toBeNull();
  });
});

describe('fencing', () => {
  it('two leases committing concurrently: exactly one wins, the other is fenced', async () => {
    const { consumerId } = await startConsumer(3);
    const a = await acquireLease(db.pool, consumerId);
    const b = await acquireLease(db.pool, consumerId);
    const plan = (fence: Fence, entity: string) =>
      makePlan(consumerId, { fence, position: 4, events: [trade(4, entity)] });
    const results = await Promise.all([
      commitCheckpoint(db.pool, plan({ leaseEpoch: a.leaseEpoch, version: a.version }, 'from-a')),
      commitCheckpoint(db.pool, plan({ leaseEpoch: b.leaseEpoch, version: b.version }, 'from-b')),
    ]);
    expect(results[0]).toMatchObject({ kind: 'fenced' });
    expect(results[1]).toMatchObject({ kind: 'committed' });
    expect((await dumpState(db.pool, consumerId)).executions.map((e) => e.entityId)).toEqual(['from-b']);
  });

  it('two commits racing on the same fence: one wins, the loser never overwrites', async () => {
    const { consumerId, fence } = await startConsumer(3);
    const results = await Promise.all(
      [4, 5].map((position) =>
        commitCheckpoint(
          db.pool,
          makePlan(consumerId, { fence, position, events: [trade(position, `e-${position}`)] }),
        ),
      ),
    );
    expect(results.map((r) => r.kind).sort()).toEqual(['committed', 'fenced']);
    const state = await dumpState(db.pool, consumerId);
    expect(state.executions).toHaveLength(1);
    expect(state.checkpoint?.version).toBe(fence.version + 1);
  });
});

describe('bad input', () => {
  it.each([
    ['an empty token', (p: PlanOptions) => ({ ...p, token: '' })],
    ['positions going backwards', (p: PlanOptions) => ({ ...p, events: [trade(5, 'e-5'), trade(4, 'e-4')] })],
    ['an event beyond the checkpoint', (p: PlanOptions) => ({ ...p, events: [trade(9, 'e-9')] })],
    ['an event at or before the saved position', (p: PlanOptions) => ({ ...p, events: [trade(3, 'e-3')] })],
    ['a checkpoint behind the saved position', (p: PlanOptions) => ({ ...p, position: 2 })],
    ['a generation that is not the saved one', (p: PlanOptions) => ({ ...p, generation: 2 })],
    [
      'malformed trade data',
      (p: PlanOptions) => ({
        ...p,
        events: [stagedEvent({ position: 4, kind: 'trade', entityId: 'e', data: { ...tradeData(), price: '1e3' } })],
      }),
    ],
  ])('refuses %s with InvalidPlan and changes nothing', async (_what, mutate) => {
    const { consumerId, fence } = await startConsumer(3, [trade(3, 'e-0')]);
    const before = await dumpState(db.pool, consumerId);
    const error = await commitCheckpoint(db.pool, makePlan(consumerId, mutate({ fence, position: 5 }))).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(InvalidPlan);
    expect(error).toMatchObject({ code: 'invalid_plan' });
    expect(await dumpState(db.pool, consumerId)).toEqual(before);
  });

  it('a generation mismatch between checkpoint and binding is refused', async () => {
    const { consumerId, fence } = await startConsumer(3);
    const plan = makePlan(consumerId, { fence, position: 4 });
    await expect(
      commitCheckpoint(db.pool, { ...plan, checkpoint: { ...plan.checkpoint, generation: 2 } }),
    ).rejects.toBeInstanceOf(InvalidPlan);
  });
});

describe('group commit', () => {
  it('commits a run of checkpoints together: one outcome each, in order, one version each', async () => {
    const { consumerId, fence } = await startConsumer(3);
    const plans = [
      makePlan(consumerId, { fence, position: 4, events: [trade(4, 'e-1')] }),
      // later plans of a run carry the fence they were staged with; the run is fenced on the first one's
      makePlan(consumerId, {
        fence,
        position: 6,
        events: [correction(5, 'e-1', 2, { price: '0.7' }), trade(6, 'e-2')],
      }),
      makePlan(consumerId, { fence, position: 8 }),
    ];
    const outcomes = await commitCheckpoints(db.pool, plans);
    expect(outcomes).toEqual([
      expect.objectContaining({ kind: 'committed', position: 4, version: fence.version + 1, applied: 1 }),
      expect.objectContaining({ kind: 'committed', position: 6, version: fence.version + 2, applied: 2 }),
      expect.objectContaining({ kind: 'committed', position: 8, version: fence.version + 3, applied: 0 }),
    ]);
    const state = await dumpState(db.pool, consumerId);
    expect(state.checkpoint).toMatchObject({ position: 8, version: fence.version + 3 });
    expect(state.executions.map((e) => [e.entityId, e.revision])).toEqual([
      ['e-1', 2],
      ['e-2', 1],
    ]);
    expect(state.volumes).toEqual({ 'm-1': '120/2' });
    // The run as a whole is fenced: replaying it with its (now stale) fence writes nothing.
    expect(await commitCheckpoints(db.pool, plans)).toEqual([expect.objectContaining({ kind: 'fenced' })]);
    expect(await dumpState(db.pool, consumerId)).toEqual(state);
  });

  it('a conflict in the middle of a run keeps exactly the checkpoints before it', async () => {
    const first = trade(4, 'e-1', {}, { eventId: 'ev-A' });
    const { consumerId, fence } = await startConsumer(4, [first]);
    const conflicting = trade(7, 'e-9', { price: '0.9' }, { eventId: 'ev-A' });
    const outcomes = await commitCheckpoints(db.pool, [
      makePlan(consumerId, { fence, position: 5, events: [trade(5, 'e-2')] }),
      makePlan(consumerId, { fence, position: 6, events: [trade(6, 'e-3')] }),
      makePlan(consumerId, { fence, position: 7, events: [{ ...conflicting, ordinal: 1 }] }),
      makePlan(consumerId, { fence, position: 8, events: [trade(8, 'e-4')] }),
    ]);
    expect(outcomes).toEqual([
      expect.objectContaining({ kind: 'committed', position: 5 }),
      expect.objectContaining({ kind: 'committed', position: 6 }),
      { kind: 'conflict', eventId: 'ev-A', savedHash: first.contentHash, incomingHash: conflicting.contentHash },
    ]);
    const state = await dumpState(db.pool, consumerId);
    expect(state.checkpoint).toMatchObject({ position: 6, version: fence.version + 2 });
    expect(state.executions.map((e) => e.entityId)).toEqual(['e-1', 'e-2', 'e-3']);
  });

  it('a held quarantine in the middle of a run: the earlier checkpoints commit, the held records are written', async () => {
    const { consumerId, fence } = await startConsumer(3);
    const orphan = correction(5, 'never-seen', 2);
    const outcomes = await commitCheckpoints(db.pool, [
      makePlan(consumerId, { fence, position: 4, events: [trade(4, 'e-1')] }),
      makePlan(consumerId, { fence, position: 5, events: [orphan] }),
      makePlan(consumerId, { fence, position: 6, events: [trade(6, 'e-2')] }),
    ]);
    expect(outcomes.map((o) => o.kind)).toEqual(['committed', 'held_quarantine']);
    const state = await dumpState(db.pool, consumerId);
    expect(state.checkpoint?.position).toBe(4);
    expect(state.executions.map((e) => e.entityId)).toEqual(['e-1']);
    expect(state.quarantine).toEqual([
      { eventId: orphan.eventId, disposition: 'held', reason: 'unknown_correction_target' },
    ]);
  });

  it('a plan the saved state refuses in the middle of a run: the earlier checkpoints commit, then InvalidPlan', async () => {
    const { consumerId, fence } = await startConsumer(3);
    const error = await commitCheckpoints(db.pool, [
      makePlan(consumerId, { fence, position: 5, events: [trade(5, 'e-1')] }),
      // behind the checkpoint before it
      makePlan(consumerId, { fence, position: 4, events: [trade(4, 'e-2')] }),
    ]).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidPlan);
    expect((await dumpState(db.pool, consumerId)).checkpoint?.position).toBe(5);
  });
});

describe('the executions a run knows (RecentExecutions)', () => {
  /**
   * Counts how the commit reached the database: pool.query is the one statement, a client checked out by the
   * caller (pool.connect() without a callback; pool.query checks one out with a callback) a transaction.
   */
  function countCalls(pool: pg.Pool) {
    const counts = { statements: 0, transactions: 0 };
    const spied = pool as unknown as Record<'query' | 'connect', (...args: unknown[]) => unknown>;
    const { query, connect } = spied;
    spied.query = (...args) => ((counts.statements += 1), query.apply(pool, args));
    spied.connect = (...args) => ((counts.transactions += args.length === 0 ? 1 : 0), connect.apply(pool, args));
    return { counts, restore: () => Object.assign(spied, { query, connect }) };
  }

  /** commitCheckpoints of one plan for the run that knows `recent`, and how it reached the database. */
  async function commitCounted(plan: CheckpointPlan, recent: RecentExecutions) {
    const calls = countCalls(db.pool);
    try {
      return { outcomes: await commitCheckpoints(db.pool, [plan], recent), counts: calls.counts };
    } finally {
      calls.restore();
    }
  }

  /** A consumer whose run committed the trade e-1 (0.5 x 100), with what that run knows. */
  async function runThatTraded() {
    const { consumerId, fence } = await startConsumer(3);
    const recent = new RecentExecutions();
    const trade1 = trade(4, 'e-1', { price: '0.5', size: '100' });
    const [outcome] = await commitCheckpoints(
      db.pool,
      [makePlan(consumerId, { fence, position: 4, events: [trade1] })],
      recent,
    );
    return { consumerId, fence: next(fence, outcome!), recent };
  }

  it('a correction of an entity the run committed earlier commits in the one statement, exactly', async () => {
    const { consumerId, fence, recent } = await runThatTraded();
    const { outcomes, counts } = await commitCounted(
      makePlan(consumerId, { fence, position: 5, events: [correction(5, 'e-1', 2, { price: '0.7', size: '100' })] }),
      recent,
    );
    expect(counts).toEqual({ statements: 1, transactions: 0 });
    expect(outcomes).toEqual([expect.objectContaining({ kind: 'committed', position: 5, applied: 1 })]);
    const state = await dumpState(db.pool, consumerId);
    expect(state.executions).toEqual([expect.objectContaining({ entityId: 'e-1', revision: 2, notional: '70' })]);
    expect(state.revisions.map((r) => [r.entityId, r.revision])).toEqual([
      ['e-1', 1],
      ['e-1', 2],
    ]);
    expect(state.volumes).toEqual({ 'm-1': '70/1' });
  });

  it('an event that has a receipt fails the one statement whole; the read decides it a duplicate', async () => {
    const { consumerId, fence, recent } = await runThatTraded();
    // e-1's trade again, delivered at a later position (the same content), beside a new trade: the statement's
    // insert of its receipt finds the one saved.
    const { outcomes, counts } = await commitCounted(
      makePlan(consumerId, {
        fence,
        position: 5,
        events: [
          trade(5, 'e-1', { price: '0.5', size: '100' }, { eventId: 'ev-4-1' }),
          trade(5, 'e-2', {}, { ordinal: 2 }),
        ],
      }),
      recent,
    );
    expect(counts).toEqual({ statements: 1, transactions: 1 });
    expect(outcomes).toEqual([expect.objectContaining({ kind: 'committed', applied: 1, duplicates: 1 })]);
    const state = await dumpState(db.pool, consumerId);
    expect(state.executions.map((e) => e.entityId).sort()).toEqual(['e-1', 'e-2']);
    expect(state.volumes).toEqual({ 'm-1': '100/2' });
  });

  it('a trade of an entity the database holds and the run does not know fails the one statement; the read decides', async () => {
    const { consumerId, fence } = await runThatTraded();
    // A run that knows nothing (a new attempt's) sees another eventId trade e-1: no effect, as its row exists.
    const { outcomes, counts } = await commitCounted(
      makePlan(consumerId, {
        fence,
        position: 5,
        events: [trade(5, 'e-1', { price: '0.9' }, { eventId: 'ev-again' })],
      }),
      new RecentExecutions(),
    );
    expect(counts).toEqual({ statements: 1, transactions: 1 });
    expect(outcomes).toEqual([expect.objectContaining({ kind: 'committed', applied: 0, noEffect: 1 })]);
    const state = await dumpState(db.pool, consumerId);
    expect(state.executions).toEqual([expect.objectContaining({ entityId: 'e-1', revision: 1, notional: '50' })]);
    expect(state.volumes).toEqual({ 'm-1': '50/1' });
  });

  it('rows known at another version are not used: after another attempt took the consumer, the read decides', async () => {
    const { consumerId, recent } = await runThatTraded();
    // Another attempt leases the consumer and corrects e-1 itself; this run's row of e-1 is now stale.
    const lease = await acquireLease(db.pool, consumerId);
    const other = { leaseEpoch: lease.leaseEpoch, version: lease.version };
    const corrected = await commitCheckpoint(
      db.pool,
      makePlan(consumerId, { fence: other, position: 5, events: [correction(5, 'e-1', 2, { price: '0.6' })] }),
    );
    const { outcomes, counts } = await commitCounted(
      makePlan(consumerId, {
        fence: next(other, corrected),
        position: 6,
        events: [correction(6, 'e-1', 3, { price: '0.8', size: '100' })],
      }),
      recent,
    );
    expect(counts.transactions).toBe(1);
    expect(outcomes).toEqual([expect.objectContaining({ kind: 'committed', position: 6, applied: 1 })]);
    const state = await dumpState(db.pool, consumerId);
    expect(state.executions).toEqual([expect.objectContaining({ entityId: 'e-1', revision: 3, notional: '80' })]);
    expect(state.revisions.map((r) => [r.entityId, r.revision])).toEqual([
      ['e-1', 1],
      ['e-1', 2],
      ['e-1', 3],
    ]);
    expect(state.volumes).toEqual({ 'm-1': '80/1' });
  });
});

describe('migrate', () => {
  /** Every column of the public schema, so a migration applied again (or half) shows as a difference. */
  async function columnsOf(pool: pg.Pool): Promise<string[]> {
    const res = await pool.query<{ column: string }>(
      `SELECT table_name || '.' || column_name || ' ' || data_type AS column
         FROM information_schema.columns WHERE table_schema = 'public'
        ORDER BY table_name, ordinal_position`,
    );
    return res.rows.map((r) => r.column);
  }

  it('applies each migration exactly once, however often and however concurrently it runs', async () => {
    const migrations = readdirSync(MIGRATIONS_FOLDER).filter((f) => f.endsWith('.sql'));
    expect(migrations.length).toBeGreaterThan(0);
    const fresh = await createTestDatabase({ migrated: false, poolMax: 4 });
    try {
      await migrate(fresh.pool);
      const columns = await columnsOf(fresh.pool);
      expect(columns).toContain('checkpoints.token text');

      await migrate(fresh.pool);
      await Promise.all([migrate(fresh.pool), migrate(fresh.pool), migrate(fresh.pool)]);
      const journal = await fresh.pool.query<{ hash: string }>('SELECT hash FROM drizzle.__drizzle_migrations');
      expect(journal.rows).toHaveLength(migrations.length);
      expect(new Set(journal.rows.map((r) => r.hash)).size).toBe(migrations.length);
      expect(await columnsOf(fresh.pool)).toEqual(columns);
    } finally {
      await fresh.drop();
    }
  });
});
