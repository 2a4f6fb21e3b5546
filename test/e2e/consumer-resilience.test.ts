// Fencing and long life: a zombie streaming attempt (its heartbeat timed out and a new attempt took the
// lease) can neither commit nor ACK, and continue-as-new carries the consumer's state into the next run.
import { Context } from '@temporalio/activity';
import { describe, expect, it } from 'vitest';
import { consumeStream } from '../../activities/consume-stream.js';
import type { ConsumeStreamDeps } from '../../activities/stream-ports.js';
import { poolStore } from '../../activities/index.js';
import type { ConsumeOutcome } from '../../activities/types.js';
import { useTestDatabase } from '../support/db.js';
import { useResources } from '../support/leaks.js';
import { waitFor } from '../support/temporal.js';
import { journalOf, trade, waitForPhase, waitForStatus, withConsumerStack, within } from './consumer-harness.js';
import { expectReplayable } from './replay-check.js';

const db = useTestDatabase();

function deferred<T>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

const silent = { info: () => undefined, warn: () => undefined, error: () => undefined };

describe('fencing and continue-as-new', () => {
  const res = useResources();

  it('a zombie attempt still running after a new attempt took the lease cannot commit or ACK', async () => {
    const consumerId = 'zombie-1';
    const journal = journalOf([1, 2, 3, 4].map((i) => ({ events: [trade(`z${i}`, 'mA', '0.5', '2')] })));
    const newAttemptLeased = deferred<void>();
    const zombieCommits: string[] = [];
    let zombieAcks = 0;
    let zombie: Promise<ConsumeOutcome | Error> | null = null;

    await withConsumerStack(
      res,
      db,
      {
        journal,
        // The zombie's old connection keeps delivering after the new attempt subscribes (stale callbacks).
        server: { faults: { drainOldConnections: true } },
        store: (real) => ({
          async acquireLease(id, options) {
            const state = await real.acquireLease(id, options);
            newAttemptLeased.resolve();
            return state;
          },
          commitCheckpoints: real.commitCheckpoints,
        }),
        overrideActivities: (activities, { config }) => ({
          consumeStream(input) {
            // Only the very first attempt of the first lease turns into the zombie.
            if (zombie !== null || Context.current().info.attempt > 1) return activities.consumeStream(input);
            // Attempt 1 never heartbeats (Temporal times it out) and holds its first commit until attempt 2 has leased.
            const real = poolStore(db.pool);
            const deps: ConsumeStreamDeps = {
              config: config.stream,
              log: silent,
              store: {
                acquireLease: real.acquireLease,
                async commitCheckpoints(plans) {
                  await newAttemptLeased.promise;
                  try {
                    const outcomes = await real.commitCheckpoints(plans);
                    zombieCommits.push(...outcomes.map((o) => o.kind));
                    return outcomes;
                  } catch (error) {
                    zombieCommits.push(error instanceof Error ? error.name : 'error');
                    throw error;
                  }
                },
              },
              hooks: { afterAck: () => void (zombieAcks += 1) },
            };
            zombie = consumeStream(deps, input, {
              heartbeat: () => undefined,
              signal: new AbortController().signal,
            }).catch((error: Error) => error);
            return zombie.then((outcome) => (outcome instanceof Error ? Promise.reject(outcome) : outcome));
          },
        }),
      },
      async ({ server, startConsumer }) => {
        // The lease outlasts the heartbeat timeout: the zombie is timed out and fenced, not ended by its own lease.
        const handle = await startConsumer({ consumerId, leaseMs: 4_000, tuning: { heartbeatTimeoutMs: 2_000 } });
        await within(
          server.waitForAck((a) => a.consumerId === consumerId && a.position === 4),
          60_000,
          'the ACK of checkpoint 4 from the new attempt',
        );
        const outcome = await within(zombie!, 30_000, 'the zombie attempt to end');
        expect(outcome).toBeInstanceOf(Error);
        expect((outcome as Error).name).toBe('LeaseLost');
        expect(zombieCommits).toEqual(['fenced']);
        expect(zombieAcks).toBe(0);
        const zombieConnection = server.connections[0]!.connectionId;
        expect(server.acks.filter((a) => a.connectionId === zombieConnection)).toEqual([]);
        const status = await waitForStatus(handle, 'position 4', (s) => s.committed?.position === 4);
        expect(status.phase).toBe('streaming');
      },
    );
    const { rows } = await db.pool.query<{ entity_id: string }>(
      'SELECT entity_id FROM executions WHERE consumer_id = $1 ORDER BY entity_id',
      [consumerId],
    );
    expect(rows.map((r) => r.entity_id)).toEqual(['z1', 'z2', 'z3', 'z4']);
  });

  it('continue-as-new carries the committed checkpoint, counters and start into the next run', async () => {
    const consumerId = 'can-1';
    const journal = journalOf([1, 2, 3, 4].map((i) => ({ events: [trade(`n${i}`, 'mA', '0.5', '2')] })));
    await withConsumerStack(res, db, { journal }, async ({ server, client, startConsumer, track }) => {
      const handle = await startConsumer({ consumerId, leaseMs: 300, tuning: { maxRunsPerExecution: 2 } });
      const firstRunId = handle.firstExecutionRunId;
      track(client.workflow.getHandle(handle.workflowId, firstRunId));
      const latest = client.workflow.getHandle(handle.workflowId);
      await waitFor(async () => (await latest.describe()).runId !== firstRunId, {
        description: 'a continued-as-new run',
      });
      const firstHistory = await client.workflow.getHandle(handle.workflowId, firstRunId).fetchHistory();
      expect(firstHistory.events?.at(-1)?.workflowExecutionContinuedAsNewEventAttributes).toBeTruthy();

      const status = await waitForStatus(handle, 'a run after continue-as-new', (s) => s.runs >= 3);
      expect(status.committed?.position).toBe(4);
      expect(status.start).toEqual({ mode: 'resume' });
      expect(status.counters.checkpointsCommitted).toBeGreaterThanOrEqual(2);
      expect(server.subscriptions.filter((s) => s.consumerId === consumerId && s.mode === 'from_floor')).toHaveLength(
        1,
      );
    });
  });

  it('retries exhausted (overloaded): a durable backoff, then the consumer resumes from its committed token', async () => {
    const consumerId = 'backoff-1';
    const journal = journalOf([1, 2].map((i) => ({ events: [trade(`b${i}`, 'mA', '0.5', '2')] })));
    await withConsumerStack(res, db, { journal }, async ({ server, startConsumer }) => {
      const handle = await startConsumer({
        consumerId,
        leaseMs: 1_000,
        tuning: { backoffInitialMs: 3_000 },
      });
      await within(
        server.waitForSubscription((s) => s.consumerId === consumerId && s.mode === 'resume'),
        60_000,
        'the resumed session',
      );
      // Every subscribe of the next lease's two attempts is refused: the activity's retries run out.
      server.faults.overloadSubscribes = { count: 2, retryAfterMs: 20 };
      const backingOff = await waitForPhase(handle, 'backoff');
      expect(backingOff.lastError).toMatch(/^StreamTransportError: overloaded/);
      expect(backingOff.committed?.position).toBe(2);
      const resumed = await within(
        server.waitForSubscription(
          (s) => s.consumerId === consumerId && s.mode === 'resume' && server.subscriptions.indexOf(s) > 1,
        ),
        60_000,
        'the session after the backoff',
      );
      expect(resumed.startPosition).toBe(2);
      await waitForPhase(handle, 'streaming');
    });
  });

  it('graceful shutdown ends the running lease at a checkpoint boundary; a new worker resumes from the committed token', async () => {
    const consumerId = 'shutdown-1';
    const journal = journalOf([1, 2, 3, 4].map((i) => ({ events: [trade(`d${i}`, 'mA', '0.5', '2')] })));
    await withConsumerStack(res, db, { journal }, async ({ server, startConsumer, restartWorker }) => {
      const handle = await startConsumer({ consumerId, leaseMs: 600_000 });
      await within(
        server.waitForAck((a) => a.consumerId === consumerId && a.position === 4),
        60_000,
        'the ACK of checkpoint 4',
      );
      await within(
        server.waitForSubscription((s) => s.consumerId === consumerId && s.mode === 'resume'),
        60_000,
        'the long lease',
      );
      await restartWorker(async () => {
        // The ten-minute lease did not hold the shutdown: it completed as `cancelled`, nothing uncommitted was ACKed.
        // The server writes an activity's completion once no workflow task is in flight (a progress signal's may
        // be, as the worker stops): wait for it.
        const outcome = await waitFor(
          async () => {
            const history = await handle.fetchHistory();
            const completed = history.events!.filter((e) => e.activityTaskCompletedEventAttributes).at(-1)!;
            const payload = completed.activityTaskCompletedEventAttributes!.result!.payloads![0]!;
            const last = JSON.parse(Buffer.from(payload.data!).toString('utf8')) as ConsumeOutcome;
            return last.kind !== 'rebound' && last;
          },
          { description: 'the long lease completed in the history', timeoutMs: 30_000 },
        );
        expect(outcome).toMatchObject({ kind: 'cancelled', committed: { position: 4 } });
        expect(Math.max(...server.acks.filter((a) => a.consumerId === consumerId).map((a) => a.position))).toBe(4);
      });
      const resumed = await within(
        server.waitForSubscription(
          (s) =>
            s.consumerId === consumerId &&
            s.mode === 'resume' &&
            server.subscriptions.filter((x) => x.consumerId === consumerId).indexOf(s) > 1,
        ),
        60_000,
        'the session of the new worker',
      );
      expect(resumed.startPosition).toBe(4);
    });
  });

  it('replays every recorded history without nondeterminism and no history holds the API key', async () => {
    await expectReplayable();
  });
});
