// Rebind through a real Temporal Schedule: the rebind workflow asks the consumer for a new filter, the
// consumer rebinds from its committed token (generation + 1) and applies the new filter's suffix; an ACK
// naming the old generation is rejected by the server. A consumer that cannot rebind refuses clearly.
import { WorkflowFailedError } from '@temporalio/client';
import { describe, expect, it } from 'vitest';
import type { StreamFilter } from '../../protocol/codec.js';
import type { RebindResult, rebindWorkflow } from '../../workflows/rebind.js';
import { pauseSignal } from '../../workflows/definitions.js';
import { useTestDatabase } from '../support/db.js';
import { useResources } from '../support/leaks.js';
import { ScriptClient } from '../support/script-client.js';
import { waitFor } from '../support/temporal.js';
import {
  API_KEY,
  journalOf,
  trade,
  waitForPhase,
  waitForStatus,
  withConsumerStack,
  within,
} from './consumer-harness.js';
import { expectReplayable } from './replay-check.js';

const db = useTestDatabase();

describe('rebind', () => {
  const res = useResources();

  it('a scheduled rebind applies generation 2 from the committed token; an ACK naming generation 1 is rejected', async () => {
    const consumerId = 'rebind-1';
    const gen1: StreamFilter = { markets: ['mA'] };
    const gen2: StreamFilter = { markets: ['mA', 'mB'] };
    const journal = journalOf([{ events: [trade('r1', 'mA', '0.5', '2'), trade('s1', 'mB', '0.5', '4')] }]);
    // No live checkpoint while generation 1 idles, so the rebind starts from the token at 1.
    const server = { liveCheckpointEvery: 1_000, liveCheckpointIntervalMs: 600_000 };
    await withConsumerStack(
      res,
      db,
      { journal, server },
      async ({ server, client, taskQueue, startConsumer, track }) => {
        const handle = await startConsumer({ consumerId, filter: gen1, leaseMs: 60_000 });
        await within(
          server.waitForSubscription((s) => s.consumerId === consumerId && s.mode === 'resume'),
          60_000,
          'generation 1 streaming',
        );
        journal.append({ events: [trade('r2', 'mA', '0.5', '2'), trade('s2', 'mB', '0.5', '4')] });

        const schedule = await client.schedule.create({
          scheduleId: `whalehunt-rebind:${consumerId}`,
          spec: { intervals: [{ every: '1 day' }] },
          state: { paused: true },
          action: {
            type: 'startWorkflow',
            workflowType: 'rebindWorkflow',
            workflowId: `whalehunt-rebind:${consumerId}`,
            taskQueue,
            args: [{ consumerId, filter: gen2, requestedBy: 'schedule:nightly', waitMs: 60_000 }],
          },
        });
        try {
          await schedule.trigger();
          const started = await waitFor(
            async () => (await schedule.describe()).info.recentActions[0]?.action.workflow,
            {
              description: 'the schedule to start the rebind workflow',
            },
          );
          const rebind = client.workflow.getHandle<typeof rebindWorkflow>(
            started.workflowId,
            started.firstExecutionRunId,
          );
          track(rebind);
          const result: RebindResult = await rebind.result();
          expect(result).toMatchObject({ consumerId, generation: 2 });
        } finally {
          await schedule.delete();
        }

        const rebound = server.subscriptions.find((s) => s.consumerId === consumerId && s.mode === 'rebind');
        expect(rebound).toMatchObject({ generation: 2, startPosition: 1, cut: 2 });
        const status = await waitForStatus(
          handle,
          'generation 2 streaming',
          (s) => s.phase === 'streaming' && s.committed?.generation === 2,
        );
        expect(status.filter).toEqual(gen2);
        expect(status.pendingRebind).toBeNull();

        // Stop the consumer's sessions, then present a generation-1 ACK on a generation-2 connection.
        await handle.signal(pauseSignal, { actor: 'test', reason: 'stale ACK probe' });
        await waitForPhase(handle, 'paused');
        const { rows } = await db.pool.query<{ token: string }>(
          'SELECT token FROM checkpoints WHERE consumer_id = $1',
          [consumerId],
        );
        const probe = res.track(await ScriptClient.connect(server.url), (c) => c.close(), 'stale ACK probe');
        const { hello } = await probe.handshake(API_KEY, {
          consumerId,
          subscriptionId: `sub-${consumerId}`,
          filter: gen2,
          start: { mode: 'resume', token: rows[0]!.token },
        });
        const checkpoint = await probe.nextOfType('checkpoint');
        expect(checkpoint.generation).toBe(2);
        probe.ack(hello.connectionId, { ...checkpoint, generation: 1 });
        const rejected = await within(
          server.waitForRejectedAck((a) => a.consumerId === consumerId),
          30_000,
          'the stale ACK to be rejected',
        );
        expect(rejected).toMatchObject({ generation: 1, reason: 'stale_generation' });
        await res.close(probe);
      },
    );

    const { rows: executions } = await db.pool.query<{ entity_id: string }>(
      'SELECT entity_id FROM executions WHERE consumer_id = $1 ORDER BY entity_id',
      [consumerId],
    );
    // Generation 1 applied r1; generation 2 applied the suffix after 1 with the new filter (r2 and s2), not s1.
    expect(executions.map((r) => r.entity_id)).toEqual(['r1', 'r2', 's2']);
    const { rows: binding } = await db.pool.query<{ generation: number; filter: StreamFilter }>(
      'SELECT generation, filter FROM consumer_bindings WHERE consumer_id = $1',
      [consumerId],
    );
    expect(binding).toEqual([{ generation: 2, filter: gen2 }]);
  });

  it('a consumer that awaits an operator (here: paused) refuses the rebind, one not running cannot be asked: the rebind workflow fails saying why', async () => {
    const consumerId = 'rebind-refused-1';
    const journal = journalOf([{ events: [trade('p1', 'mA', '0.5', '2')] }]);
    await withConsumerStack(res, db, { journal }, async ({ server, client, taskQueue, startConsumer, track }) => {
      const handle = await startConsumer({ consumerId });
      await within(
        server.waitForSubscription((s) => s.consumerId === consumerId && s.mode === 'resume'),
        60_000,
        'streaming',
      );
      await handle.signal(pauseSignal, { actor: 'ops', reason: 'investigating' });
      await waitForPhase(handle, 'paused');

      const rebind = await client.workflow.start<typeof rebindWorkflow>('rebindWorkflow', {
        taskQueue,
        workflowId: `rebind-now:${consumerId}`,
        args: [{ consumerId, filter: { kinds: ['trade'] }, requestedBy: 'ops', waitMs: 30_000 }],
      });
      track(rebind);
      const failure = await rebind.result().then(
        () => null,
        (error: unknown) => error,
      );
      expect(failure).toBeInstanceOf(WorkflowFailedError);
      expect((failure as WorkflowFailedError).cause?.message).toMatch(
        /refused the rebind: consumer rebind-refused-1 is paused \(paused by ops: investigating\)/,
      );
      expect(server.subscriptions.some((s) => s.consumerId === consumerId && s.mode === 'rebind')).toBe(false);

      // A consumer whose workflow is not running cannot be asked at all.
      await handle.terminate('consumer stopped for the test');
      const orphan = await client.workflow.start<typeof rebindWorkflow>('rebindWorkflow', {
        taskQueue,
        workflowId: `rebind-orphan:${consumerId}`,
        args: [{ consumerId, filter: { kinds: ['trade'] }, requestedBy: 'ops', waitMs: 30_000 }],
      });
      track(orphan);
      const notRunning = await orphan.result().then(
        () => null,
        (error: unknown) => error,
      );
      expect((notRunning as WorkflowFailedError).cause?.message).toMatch(
        /^consumer workflow whalehunt-consumer:rebind-refused-1 is not running/,
      );
    });
  });

  it('replays every recorded history without nondeterminism and no history holds the API key', async () => {
    await expectReplayable();
  });
});
