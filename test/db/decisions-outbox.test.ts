// Operator decisions (audit + the state change they imply, in one transaction) and the outbox dispatcher side.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  acquireLease,
  claimOutbox,
  commitCheckpoint,
  completeOutbox,
  consumerSummary,
  failOutbox,
  loadCommitted,
  releaseOutbox,
  recordBindingDecision,
  recordGapDecision,
  UnknownConsumer,
} from '../../db/index.js';
import { InvalidPlan } from '../../domain/errors.js';
import { useTestDatabase } from '../support/db.js';
import { committed, makePlan, trade } from '../../bench/fixtures.js';

const db = useTestDatabase();

async function committedConsumer(position: number, events = [trade(position, 'e-1')]) {
  const consumerId = `c-${randomUUID()}`;
  const lease = await acquireLease(db.pool, consumerId);
  const plan = makePlan(consumerId, {
    fence: { leaseEpoch: lease.leaseEpoch, version: lease.version },
    position,
    events,
    startMode: 'from_floor',
    whaleAlertMinNotional: '40',
  });
  const result = committed(await commitCheckpoint(db.pool, plan));
  return { consumerId, plan, fence: { leaseEpoch: lease.leaseEpoch, version: result.version } };
}

async function audit(consumerId: string) {
  const res = await db.pool.query<{
    kind: string;
    decision: string;
    actor: string;
    reason: string;
    replaced_token: string | null;
  }>('SELECT kind, decision, actor, reason, replaced_token FROM decisions WHERE consumer_id = $1 ORDER BY id', [
    consumerId,
  ]);
  return res.rows;
}

describe('gap and binding decisions', () => {
  it('live_cut keeps the token until the new start commits, fences older attempts, and is audited with the token it replaces', async () => {
    const { consumerId, fence } = await committedConsumer(7);
    const state = await recordGapDecision(db.pool, {
      consumerId,
      decision: 'live_cut',
      actor: 'ops@example',
      reason: 'cursor expired',
    });
    expect(state).toMatchObject({
      pendingStart: 'live_cut',
      token: 'tok:1:7',
      position: 7,
      version: fence.version + 1,
    });
    expect(await audit(consumerId)).toEqual([
      { kind: 'gap', decision: 'live_cut', actor: 'ops@example', reason: 'cursor expired', replaced_token: 'tok:1:7' },
    ]);

    // An attempt that loaded before the decision is fenced; a resume plan cannot skip the decision.
    expect(await commitCheckpoint(db.pool, makePlan(consumerId, { fence, position: 8 }))).toMatchObject({
      kind: 'fenced',
    });
    const decidedFence = { leaseEpoch: state.leaseEpoch, version: state.version };
    await expect(
      commitCheckpoint(db.pool, makePlan(consumerId, { fence: decidedFence, position: 8 })),
    ).rejects.toBeInstanceOf(InvalidPlan);

    // The new start may move anywhere (here: the head of a rebuilt history, below the old position).
    await commitCheckpoint(
      db.pool,
      makePlan(consumerId, { fence: decidedFence, position: 3, startMode: 'live_cut', token: 'tok:new' }),
    );
    expect(await loadCommitted(db.pool, consumerId)).toMatchObject({
      position: 3,
      token: 'tok:new',
      pendingStart: null,
    });
  });

  it('abandon stops the consumer; binding retry records only the audit', async () => {
    const { consumerId } = await committedConsumer(2);
    const retried = await recordBindingDecision(db.pool, {
      consumerId,
      decision: 'retry',
      actor: 'op',
      reason: 'binding restored',
    });
    expect(retried).toMatchObject({ pendingStart: null, abandoned: false });
    expect(await loadCommitted(db.pool, consumerId)).toMatchObject({ version: retried.version });

    const abandoned = await recordBindingDecision(db.pool, {
      consumerId,
      decision: 'abandon',
      actor: 'op',
      reason: 'retired',
    });
    expect(abandoned).toMatchObject({ abandoned: true, pendingStart: null });
    const fence = { leaseEpoch: abandoned.leaseEpoch, version: abandoned.version };
    await expect(commitCheckpoint(db.pool, makePlan(consumerId, { fence, position: 3 }))).rejects.toBeInstanceOf(
      InvalidPlan,
    );
    expect((await audit(consumerId)).map((a) => [a.kind, a.decision, a.replaced_token])).toEqual([
      ['binding', 'retry', null],
      ['binding', 'abandon', 'tok:1:2'],
    ]);
    expect((await consumerSummary(db.pool, consumerId))?.lastDecision).toMatchObject({
      kind: 'binding',
      decision: 'abandon',
      actor: 'op',
    });
  });

  it('a decision for a consumer that does not exist is refused', async () => {
    await expect(
      recordGapDecision(db.pool, { consumerId: 'nobody', decision: 'abandon', actor: 'op', reason: 'x' }),
    ).rejects.toBeInstanceOf(UnknownConsumer);
  });
});

describe('outbox', () => {
  it('writes one whale alert per qualifying event, never again on replay, and hands it to one dispatcher at a time', async () => {
    const { consumerId, plan } = await committedConsumer(5, [
      trade(4, 'big', { price: '0.5', size: '100' }),
      trade(5, 'small', { price: '0.1', size: '1' }),
    ]);
    expect((await consumerSummary(db.pool, consumerId))?.pendingOutbox).toBe(1);

    // An explicit replay of the same events: duplicates, and no second alert.
    const decided = await recordGapDecision(db.pool, {
      consumerId,
      decision: 'from_floor',
      actor: 'op',
      reason: 'replay',
    });
    const replay = await commitCheckpoint(db.pool, {
      ...plan,
      fence: { leaseEpoch: decided.leaseEpoch, version: decided.version },
    });
    expect(replay).toMatchObject({ duplicates: 2, outboxed: 0 });

    const claimed = (await claimOutbox(db.pool, { limit: 100, leaseMs: 60_000 })).filter(
      (i) => i.consumerId === consumerId,
    );
    expect(claimed).toHaveLength(1);
    expect(claimed[0]).toMatchObject({ idempotencyKey: 'whale_alert:ev-4-1', action: 'whale_alert', attempts: 1 });
    expect(claimed[0]!.payload).toMatchObject({ entityId: 'big', notional: '50', market: 'm-1' });
    // Claimed with a live lease: no other dispatcher gets it.
    expect((await claimOutbox(db.pool, { limit: 100, leaseMs: 60_000 })).some((i) => i.consumerId === consumerId)).toBe(
      false,
    );

    expect(await failOutbox(db.pool, claimed[0]!, 'webhook returned 503')).toBe(false);
    const row = await db.pool.query<{ status: string; last_error: string; due: boolean }>(
      'SELECT status, last_error, available_at > now() AS due FROM outbox WHERE id = $1',
      [claimed[0]!.id],
    );
    expect(row.rows[0]).toEqual({ status: 'pending', last_error: 'webhook returned 503', due: true });

    // Once due again it is claimed again, then completed for good.
    await db.pool.query('UPDATE outbox SET available_at = now() WHERE id = $1', [claimed[0]!.id]);
    const again = (await claimOutbox(db.pool, { limit: 100, leaseMs: 60_000 })).filter(
      (i) => i.consumerId === consumerId,
    );
    expect(again.map((i) => i.attempts)).toEqual([2]);
    expect(await completeOutbox(db.pool, again)).toEqual([again[0]!.id]);
    expect(await completeOutbox(db.pool, again)).toEqual([]);
    expect((await consumerSummary(db.pool, consumerId))?.pendingOutbox).toBe(0);
  });

  it('reclaims an action whose dispatcher lease ran out, and parks it after the last attempt', async () => {
    const { consumerId } = await committedConsumer(5, [trade(5, 'big', { price: '0.9', size: '100' })]);
    const [first] = (await claimOutbox(db.pool, { limit: 100, leaseMs: 60_000 })).filter(
      (i) => i.consumerId === consumerId,
    );
    await db.pool.query("UPDATE outbox SET claimed_until = now() - interval '1 second' WHERE id = $1", [first!.id]);
    const [reclaimed] = (await claimOutbox(db.pool, { limit: 100, leaseMs: 60_000 })).filter(
      (i) => i.consumerId === consumerId,
    );
    expect(reclaimed).toMatchObject({ id: first!.id, attempts: 2 });
    // The first claim is no longer the row's: its late completion, failure or release changes nothing.
    expect(await completeOutbox(db.pool, [first!])).toEqual([]);
    expect(await failOutbox(db.pool, first!, 'late failure', { maxAttempts: 1 })).toBe(false);
    await releaseOutbox(db.pool, [first!]);
    expect(await failOutbox(db.pool, reclaimed!, 'still failing', { maxAttempts: 2 })).toBe(true);
    const row = await db.pool.query<{ status: string }>('SELECT status FROM outbox WHERE id = $1', [first!.id]);
    expect(row.rows[0]?.status).toBe('dead');
  });
});
