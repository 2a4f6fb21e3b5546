// docs/protocol.md §7, the stream rows, end to end through the consumer workflow: real Temporal dev
// server, real Postgres, the reference stream server. Each test asserts the saved rows and the ACKs the
// server accepted.
import { describe, expect, it } from 'vitest';
import { commitOneAtATime } from '../../activities/commit-run.js';
import { StorageFailure } from '../../db/errors.js';
import { resolveQuarantineUpdate } from '../../workflows/definitions.js';
import { useTestDatabase } from '../support/db.js';
import { useResources } from '../support/leaks.js';
import {
  correction,
  journalOf,
  updateRejection,
  trade,
  waitForPhase,
  waitForStatus,
  withConsumerStack,
  within,
} from './consumer-harness.js';
import { expectReplayable } from './replay-check.js';

const db = useTestDatabase();

async function savedState(consumerId: string) {
  const {
    rows: [checkpoint],
  } = await db.pool.query<{ position: string | null; version: number; generation: number | null }>(
    'SELECT position, version, generation FROM checkpoints WHERE consumer_id = $1',
    [consumerId],
  );
  const { rows: executions } = await db.pool.query<{ entity_id: string; revision: number; notional: string }>(
    'SELECT entity_id, revision, trim_scale(notional)::text AS notional FROM executions WHERE consumer_id = $1 ORDER BY entity_id',
    [consumerId],
  );
  const { rows: volumes } = await db.pool.query<{ market: string; volume: string; execution_count: number }>(
    'SELECT market, trim_scale(volume)::text AS volume, execution_count FROM market_volumes WHERE consumer_id = $1 ORDER BY market',
    [consumerId],
  );
  return {
    position: checkpoint?.position == null ? null : Number(checkpoint.position),
    generation: checkpoint?.generation ?? null,
    executions,
    volumes,
  };
}

describe('consumer workflow over the stream', () => {
  const res = useResources();

  it('applies a filtered journal: zero-match checkpoints commit and ACK, a correction changes volume by the difference', async () => {
    const journal = journalOf([
      { events: [trade('e1', 'mA', '0.5', '10')] },
      { events: [trade('x1', 'mB', '0.5', '10')] },
      { events: [trade('x2', 'mB', '0.5', '10')] },
      { events: [trade('x3', 'mB', '0.5', '10')] },
      { events: [trade('x4', 'mB', '0.5', '10')] },
      { events: [correction('e1', 'mA', 2, '0.5', '20')] },
      { events: [trade('x5', 'mB', '0.5', '10'), trade('e2', 'mA', '0.25', '4')] },
    ]);
    await withConsumerStack(res, db, { journal }, async ({ server, startConsumer }) => {
      const handle = await startConsumer({ consumerId: 'stream-1', filter: { markets: ['mA'] } });
      await within(
        server.waitForAck((a) => a.consumerId === 'stream-1' && a.position === 7),
        60_000,
        'the ACK of checkpoint 7',
      );
      const status = await waitForStatus(
        handle,
        'committed position 7',
        (s) => s.committed?.position === 7 || s.runs > 0,
      );
      expect(status.phase).toBe('streaming');
      // Zero matches through 5: checkpoints 2 and 4 still committed and were ACKed.
      expect(server.acks.filter((a) => a.consumerId === 'stream-1').map((a) => a.position)).toEqual(
        expect.arrayContaining([2, 4, 6, 7]),
      );
      expect(server.rejectedAcks).toEqual([]);
    });
    const saved = await savedState('stream-1');
    expect(saved.position).toBe(7);
    expect(saved.executions).toEqual([
      { entity_id: 'e1', revision: 2, notional: '10' },
      { entity_id: 'e2', revision: 1, notional: '1' },
    ]);
    expect(saved.volumes).toEqual([{ market: 'mA', volume: '11', execution_count: 2 }]);
  });

  it('crash before commit: the aborted checkpoint leaves C at the previous one, the retried run redelivers and applies it once', async () => {
    const journal = journalOf([1, 2, 3, 4, 5, 6].map((i) => ({ events: [trade(`t${i}`, 'mA', '0.5', `${i}`)] })));
    let failedOnce = false;
    let positionWhenFailed: number | null | undefined;
    await withConsumerStack(
      res,
      db,
      {
        journal,
        store: (real) => ({
          acquireLease: real.acquireLease,
          commitCheckpoints: (plans) =>
            commitOneAtATime(async (plan) => {
              if (!failedOnce && plan.checkpoint.position === 4) {
                failedOnce = true;
                positionWhenFailed = (await savedState('crash-1')).position;
                // As the database layer reports an aborted transaction: a retryable storage failure.
                throw new StorageFailure('commitCheckpoint', 'crash-1', '40P01', true, {
                  cause: new Error('injected: the local transaction aborted before COMMIT'),
                });
              }
              const [outcome] = await real.commitCheckpoints([plan]);
              return outcome!;
            }, plans),
        }),
      },
      async ({ server, startConsumer }) => {
        await startConsumer({ consumerId: 'crash-1' });
        await within(
          server.waitForAck((a) => a.consumerId === 'crash-1' && a.position === 6),
          60_000,
          'the ACK of checkpoint 6',
        );
        expect(positionWhenFailed).toBe(2);
        // The retried attempt resumed from C=2 and got 3 and 4 again.
        const resumed = server.subscriptions.filter((s) => s.consumerId === 'crash-1' && s.mode === 'resume');
        expect(resumed[0]?.startPosition).toBe(2);
        expect(server.acks.filter((a) => a.consumerId === 'crash-1' && a.position === 4)).toHaveLength(1);
      },
    );
    const saved = await savedState('crash-1');
    expect(saved.position).toBe(6);
    expect(saved.executions.map((e) => e.entity_id)).toEqual(['t1', 't2', 't3', 't4', 't5', 't6']);
    expect(saved.volumes).toEqual([{ market: 'mA', volume: '10.5', execution_count: 6 }]);
  });

  it('lost ACK: checkpoint 4 is committed, its ACK never accepted, and the next session resumes after 4', async () => {
    const journal = journalOf([1, 2, 3, 4].map((i) => ({ events: [trade(`l${i}`, 'mA', '0.5', '2')] })));
    await withConsumerStack(
      res,
      db,
      { journal, server: { checkpointEvery: 4, faults: { ack: { mode: 'lose', count: 1 } } } },
      async ({ server, startConsumer }) => {
        await startConsumer({ consumerId: 'lost-ack-1', leaseMs: 1_500 });
        const lost = await within(
          server.waitForRejectedAck((a) => a.consumerId === 'lost-ack-1'),
          60_000,
          'the lost ACK',
        );
        expect(lost).toMatchObject({ position: 4, reason: 'fault_lost' });
        // The lease ends, the next session resumes from the local token, not from the server's (lagging) ACK.
        const resumed = await within(
          server.waitForSubscription((s) => s.consumerId === 'lost-ack-1' && s.mode === 'resume'),
          60_000,
          'a resumed session',
        );
        expect(resumed.startPosition).toBe(4);
        expect(server.acks.filter((a) => a.consumerId === 'lost-ack-1')).toEqual([]);
      },
    );
    const saved = await savedState('lost-ack-1');
    expect(saved.position).toBe(4);
    expect(saved.executions).toHaveLength(4);
  });

  it('conflict: the same eventId with other content aborts the checkpoint (no commit, no ACK) and stops the consumer', async () => {
    const journal = journalOf([1, 2].map((i) => ({ events: [trade(`c${i}`, 'mA', '0.5', '2')] })));
    await withConsumerStack(res, db, { journal }, async ({ server, startConsumer }) => {
      const handle = await startConsumer({ consumerId: 'conflict-1' });
      // The first start commits 2 and returns; the resumed session then waits for live transitions.
      await within(
        server.waitForSubscription((s) => s.consumerId === 'conflict-1' && s.mode === 'resume'),
        60_000,
        'the resumed session',
      );
      server.faults.conflictingEventAt = 3;
      journal.append({ events: [trade('c3', 'mA', '0.5', '2')] });
      journal.append({ events: [trade('c4', 'mA', '0.5', '2')] });
      const status = await waitForPhase(handle, 'paused');
      expect(status.stop?.reason).toContain('conflicting_event');
      expect(status.stop?.resolveWith).toBe('node dist/cli/main.js resume --consumer conflict-1 --reason "<why>"');
      expect(status.committed?.position).toBe(2);
      // Checkpoint 2 was ACKed (by the first start and again at the resumed session's cut); nothing after it.
      expect(new Set(server.acks.filter((a) => a.consumerId === 'conflict-1').map((a) => a.position))).toEqual(
        new Set([2]),
      );
    });
    const saved = await savedState('conflict-1');
    expect(saved.position).toBe(2);
    expect(saved.executions.map((e) => e.entity_id)).toEqual(['c1', 'c2']);
  });

  it('missing correction target: held quarantine blocks the checkpoint until an operator releases it, then the consumer goes on', async () => {
    const journal = journalOf([
      { events: [trade('q1', 'mA', '0.5', '2')] },
      { events: [trade('q2', 'mA', '0.5', '2')] },
      { events: [correction('ghost', 'mA', 2, '0.5', '8')] },
      { events: [trade('q3', 'mA', '0.5', '2')] },
    ]);
    await withConsumerStack(res, db, { journal }, async ({ server, startConsumer }) => {
      const handle = await startConsumer({ consumerId: 'quarantine-1' });
      const held = await waitForPhase(handle, 'awaiting_quarantine_decision');
      expect(held.stop?.reason).toContain('ghost');
      expect(held.stop?.resolveWith).toContain(
        'node dist/cli/main.js resolve-quarantine --consumer quarantine-1 --decision release_terminal',
      );
      expect(held.committed?.position).toBe(2);
      expect(server.acks.filter((a) => a.consumerId === 'quarantine-1').map((a) => a.position)).toEqual([2]);

      // An update without a reason is rejected before it reaches history; the valid one is applied.
      expect(
        await updateRejection(
          handle.executeUpdate(resolveQuarantineUpdate, {
            args: [{ decision: 'release_terminal', actor: 'ops', reason: ' ' }],
          }),
        ),
      ).toMatch(/reason: reason is required/);
      const after = await handle.executeUpdate(resolveQuarantineUpdate, {
        args: [{ decision: 'release_terminal', actor: 'ops', reason: 'upstream confirmed the trade never existed' }],
      });
      expect(after.phase).toBe('streaming');
      await within(
        server.waitForAck((a) => a.consumerId === 'quarantine-1' && a.position === 4),
        60_000,
        'the ACK of checkpoint 4',
      );
    });
    const saved = await savedState('quarantine-1');
    expect(saved.position).toBe(4);
    // No execution is fabricated for the unknown target.
    expect(saved.executions.map((e) => e.entity_id)).toEqual(['q1', 'q2', 'q3']);
    const { rows: quarantined } = await db.pool.query(
      'SELECT event_id, entity_id, disposition, decided_by FROM quarantine WHERE consumer_id = $1',
      ['quarantine-1'],
    );
    expect(quarantined).toEqual([
      expect.objectContaining({ entity_id: 'ghost', disposition: 'terminal', decided_by: 'ops' }),
    ]);
    const { rows: decisions } = await db.pool.query(
      'SELECT kind, decision, actor, reason FROM decisions WHERE consumer_id = $1',
      ['quarantine-1'],
    );
    expect(decisions).toEqual([
      {
        kind: 'quarantine',
        decision: 'release_terminal',
        actor: 'ops',
        reason: 'upstream confirmed the trade never existed',
      },
    ]);
  });

  it('replays every recorded history without nondeterminism and no history holds the API key', async () => {
    await expectReplayable();
  });
});
