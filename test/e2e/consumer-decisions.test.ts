// reset_required end to end: the consumer stops, keeps its token, is found by a visibility query, and goes
// on only after an explicit, audited decision (signal or validated update). Nothing jumps to live by itself.
import { describe, expect, it } from 'vitest';
import {
  pauseSignal,
  resolveGapSignal,
  resolveGapUpdate,
  resumeSignal,
  type GapResolution,
} from '../../workflows/definitions.js';
import { useTestDatabase } from '../support/db.js';
import { useResources } from '../support/leaks.js';
import { waitForVisibility } from '../support/temporal.js';
import {
  journalOf,
  savedCheckpoint,
  trade,
  updateRejection,
  waitForPhase,
  withConsumerStack,
  within,
} from './consumer-harness.js';
import { expectReplayable } from './replay-check.js';

const db = useTestDatabase();

async function executionIds(consumerId: string): Promise<string[]> {
  const { rows } = await db.pool.query<{ entity_id: string }>(
    'SELECT entity_id FROM executions WHERE consumer_id = $1 ORDER BY entity_id',
    [consumerId],
  );
  return rows.map((r) => r.entity_id);
}

describe('reset_required waits for an explicit decision', () => {
  const res = useResources();

  it('expired cursor: stops with the token kept, is found by phase, rejects invalid updates, and from_floor (signal) resumes at the floor', async () => {
    let tokenAt4: string | undefined;
    const journal = journalOf([1, 2, 3, 4].map((i) => ({ events: [trade(`g${i}`, 'mA', '0.5', '2')] })));
    await withConsumerStack(res, db, { journal }, async ({ server, client, startConsumer }) => {
      const handle = await startConsumer({ consumerId: 'gap-1' });
      await within(
        server.waitForAck((a) => a.consumerId === 'gap-1' && a.position === 4),
        60_000,
        'the ACK of checkpoint 4',
      );

      // Paused (at a checkpoint boundary), the consumer misses transitions that then fall below the retention floor.
      await handle.signal(pauseSignal, { actor: 'ops', reason: 'maintenance window' });
      const paused = await waitForPhase(handle, 'paused');
      expect(paused.stop?.reason).toBe('paused by ops: maintenance window');
      for (const i of [5, 6, 7, 8]) journal.append({ events: [trade(`g${i}`, 'mA', '0.5', '2')] });
      journal.setRetentionFloor(7);
      const before = await savedCheckpoint(db.pool, 'gap-1');
      expect(before.position).toBe(4);
      tokenAt4 = before.token;

      await handle.signal(resumeSignal, { actor: 'ops', reason: 'maintenance over' });
      const waiting = await waitForPhase(handle, 'awaiting_gap_decision');
      expect(waiting.stop?.reason).toContain('reset_required (cursor_expired)');
      expect(waiting.stop?.resolveWith.split('\n')).toEqual([
        'node dist/cli/main.js resolve-gap --consumer gap-1 --decision from_floor --reason "<why>"',
        'node dist/cli/main.js resolve-gap --consumer gap-1 --decision live_cut --reason "<why>"',
        'node dist/cli/main.js resolve-gap --consumer gap-1 --decision abandon --reason "<why>"',
      ]);
      await waitForVisibility(client, `WhalehuntConsumerId = "gap-1" AND WhalehuntPhase = "awaiting_gap_decision"`, 1);
      // Current Details (the Temporal UI) names the stop and the exact command that resolves it.
      const metadata = await handle.query<{ currentDetails?: string }>('__temporal_workflow_metadata');
      expect(metadata.currentDetails).toContain('## Consumer `gap-1`: awaiting_gap_decision');
      expect(metadata.currentDetails).toMatch(/\| position \| 4, head \d+, lag \d+ \(as of /);
      // Wrapped to the panel's width as a shell continuation: pasted, it is the same command.
      expect(metadata.currentDetails).toContain(
        'node dist/cli/main.js resolve-gap --consumer gap-1 \\\n  --decision from_floor --reason "<why>"',
      );

      // Invalid decisions never reach the workflow's history.
      expect(
        await updateRejection(
          handle.executeUpdate(resolveGapUpdate, {
            args: [{ decision: 'jump', actor: 'ops', reason: 'x' } as unknown as GapResolution],
          }),
        ),
      ).toMatch(/decision/);
      expect(
        await updateRejection(
          handle.executeUpdate(resolveGapUpdate, { args: [{ decision: 'live_cut', actor: '', reason: 'x' }] }),
        ),
      ).toMatch(/actor is required/);
      // The token is kept while the consumer waits, and nothing started a live or floor session on its own.
      expect(await savedCheckpoint(db.pool, 'gap-1')).toMatchObject({ position: 4, token: before.token });
      expect(server.subscriptions.filter((s) => s.consumerId === 'gap-1').map((s) => s.mode)).toEqual([
        'from_floor',
        'resume',
      ]);

      await handle.signal(resolveGapSignal, {
        decision: 'from_floor',
        actor: 'ops',
        reason: 'positions 5-6 are gone; accept the gap',
      });
      await within(
        server.waitForAck((a) => a.consumerId === 'gap-1' && a.position === 8),
        60_000,
        'the ACK of checkpoint 8',
      );
      const fromFloor = server.subscriptions.filter((s) => s.consumerId === 'gap-1' && s.mode === 'from_floor');
      expect(fromFloor.map((s) => s.startPosition)).toEqual([0, 6]);
      expect(server.subscriptions.some((s) => s.consumerId === 'gap-1' && s.mode === 'live_cut')).toBe(false);
    });
    expect(await savedCheckpoint(db.pool, 'gap-1')).toMatchObject({ position: 8 });
    expect(await executionIds('gap-1')).toEqual(['g1', 'g2', 'g3', 'g4', 'g7', 'g8']);
    const { rows: decisions } = await db.pool.query<{
      kind: string;
      decision: string;
      actor: string;
      reason: string;
      replaced_token: string | null;
    }>('SELECT kind, decision, actor, reason, replaced_token FROM decisions WHERE consumer_id = $1', ['gap-1']);
    // The audit row names who, why, and the token the decision replaced (the one saved at position 4).
    expect(decisions).toEqual([
      {
        kind: 'gap',
        decision: 'from_floor',
        actor: 'ops',
        reason: 'positions 5-6 are gone; accept the gap',
        replaced_token: tokenAt4,
      },
    ]);
  });

  it('rebuilt history: an update decides from_floor, the replay of already applied events adds no effect (duplicates)', async () => {
    const journal = journalOf([1, 2, 3, 4].map((i) => ({ events: [trade(`h${i}`, 'mA', '0.5', '2')] })));
    await withConsumerStack(res, db, { journal }, async ({ server, startConsumer }) => {
      const handle = await startConsumer({ consumerId: 'rebuilt-1' });
      await within(
        server.waitForSubscription((s) => s.consumerId === 'rebuilt-1' && s.mode === 'resume'),
        60_000,
        'the resumed session',
      );
      journal.rebuildHistory();
      const waiting = await waitForPhase(handle, 'awaiting_gap_decision');
      expect(waiting.stop?.reason).toContain('history_rebuilt');

      const status = await handle.executeUpdate(resolveGapUpdate, {
        args: [{ decision: 'from_floor', actor: 'ops', reason: 'provider rebuilt the journal' }],
      });
      expect(status.phase).toBe('streaming');
      expect(status.start).toEqual({ mode: 'from_floor', filter: {} });
      await within(
        server.waitForAck(
          (a) =>
            a.consumerId === 'rebuilt-1' &&
            a.position === 4 &&
            server.subscriptions.filter((s) => s.mode === 'from_floor' && s.consumerId === 'rebuilt-1').length === 2,
        ),
        60_000,
        'the ACK of checkpoint 4 in the rebuilt history',
      );
    });
    expect(await executionIds('rebuilt-1')).toEqual(['h1', 'h2', 'h3', 'h4']);
    const { rows: volume } = await db.pool.query<{ volume: string; execution_count: number }>(
      'SELECT trim_scale(volume)::text AS volume, execution_count FROM market_volumes WHERE consumer_id = $1',
      ['rebuilt-1'],
    );
    expect(volume).toEqual([{ volume: '4', execution_count: 4 }]);
    const { rows: binding } = await db.pool.query<{ history_id: string }>(
      'SELECT history_id FROM consumer_bindings WHERE consumer_id = $1',
      ['rebuilt-1'],
    );
    expect(binding[0]!.history_id).toBe(journal.historyId);
  });

  it('abandon completes the workflow; the consumer stays abandoned in the database', async () => {
    const journal = journalOf([1, 2].map((i) => ({ events: [trade(`a${i}`, 'mA', '0.5', '2')] })));
    await withConsumerStack(res, db, { journal }, async ({ server, client, startConsumer }) => {
      const handle = await startConsumer({ consumerId: 'abandon-1' });
      await within(
        server.waitForSubscription((s) => s.consumerId === 'abandon-1' && s.mode === 'resume'),
        60_000,
        'the resumed session',
      );
      journal.rebuildHistory();
      await waitForPhase(handle, 'awaiting_gap_decision');
      const status = await handle.executeUpdate(resolveGapUpdate, {
        args: [{ decision: 'abandon', actor: 'ops', reason: 'subscription retired' }],
      });
      expect(status.phase).toBe('completed');
      const result = await handle.result();
      expect(result.stop?.reason).toBe('abandoned by ops: subscription retired');
      await waitForVisibility(client, `WhalehuntConsumerId = "abandon-1" AND WhalehuntPhase = "completed"`, 1);
    });
    const { rows } = await db.pool.query<{ abandoned: boolean; position: string }>(
      'SELECT abandoned, position FROM checkpoints WHERE consumer_id = $1',
      ['abandon-1'],
    );
    expect(rows).toEqual([{ abandoned: true, position: '2' }]);
  });

  it('replays every recorded history without nondeterminism and no history holds the API key', async () => {
    await expectReplayable();
  });
});
