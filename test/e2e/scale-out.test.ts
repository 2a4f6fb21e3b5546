// Scale-out: two worker processes (`dist/worker/main.js`) on one task queue share six consumers. With three
// activity slots each, the six streaming leases spread over both; one worker is killed with SIGKILL mid-stream
// and its consumers continue on the other within the heartbeat timeout: every consumer reaches the cut, its
// database equals a plain fold of the journal, the takeover resumes from the committed token, and no ACK of a
// dead worker's session is accepted after the takeover.
import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { describe, expect, it } from 'vitest';
import { consumerSummary, loadCommitted } from '../../db/index.js';
import { Journal } from '../../simulator/journal.js';
import { ReferenceStreamServer } from '../../simulator/server.js';
import type { consumerWorkflow } from '../../workflows/index.js';
import { consumerIdSearchAttribute, consumerWorkflowId, phaseSearchAttribute } from '../../workflows/definitions.js';
import { foldExecutions, savedEffects } from '../db/consume-stream-support.js';
import { useTestDatabase } from '../support/db.js';
import { stopChildProcess, useResources } from '../support/leaks.js';
import { createTestClient, sharedWorkflowBundlePath, uniqueTaskQueue, waitFor } from '../support/temporal.js';
import { testWorkerEnv } from './consumer-harness.js';
import { spawnWorker, type WorkerProcess } from '../support/worker-process.js';

const API_KEY = `wh-scale-secret-${randomUUID()}`;
const db = useTestDatabase();

const CONSUMERS = 6;
/** Per worker: two workers hold at most six leases at once, so while all six stream each worker runs three. */
const SLOTS_PER_WORKER = 3;

/** The Temporal identity a worker process polls with (the SDK's default: pid@host). */
const identityOf = (worker: WorkerProcess) => `${worker.child.pid}@${hostname()}`;

describe('two worker processes on one task queue', () => {
  const res = useResources();

  it('share six consumers, and the survivor of a kill -9 takes over the dead one’s consumers', async () => {
    const journal = Journal.generate({ seed: 1717, transitions: 300 });
    const server = res.track(
      await ReferenceStreamServer.start({ journal, apiKeys: [API_KEY], checkpointEvery: 5 }),
      (s) => s.close(),
      'reference stream',
    );
    const testClient = res.track(await createTestClient());
    const taskQueue = uniqueTaskQueue('scale');
    const env = {
      ...testWorkerEnv({ databaseUrl: db.url, taskQueue, streamUrl: server.url, apiKey: API_KEY }),
      WORKFLOW_BUNDLE_PATH: sharedWorkflowBundlePath(),
      LOG_LEVEL: 'INFO',
      MAX_CONCURRENT_ACTIVITIES: String(SLOTS_PER_WORKER),
      DATABASE_POOL_SIZE: '4',
      // Few checkpoints wait behind a commit (they commit together), so the crash lands mid-stream.
      STAGING_MAX_EVENTS: '40',
    };
    // The doomed worker SIGKILLs itself at its first commit at or past a third of the journal: mid-stream.
    const crashAt = Math.floor(journal.head / 3);
    const doomed = spawnWorker({ ...env, WHALEHUNT_TEST_CRASH_AT: `afterCommit:${crashAt}` });
    res.track(doomed.child, (c) => stopChildProcess(c), 'worker process (doomed)');
    const survivor = spawnWorker(env);
    res.track(survivor.child, (c) => stopChildProcess(c), 'worker process (survivor)');
    for (const worker of [doomed, survivor]) {
      await waitFor(() => Promise.resolve(worker.lines.some((l) => l.includes('"worker running"'))), {
        description: `worker ${worker.child.pid} to poll`,
        timeoutMs: 60_000,
      });
    }

    const consumerIds = Array.from({ length: CONSUMERS }, (_, i) => `scale-${i}-${randomUUID().slice(0, 8)}`);
    const handles = await Promise.all(
      consumerIds.map((consumerId, i) =>
        testClient.client.workflow.start<typeof consumerWorkflow>('consumerWorkflow', {
          taskQueue,
          workflowId: consumerWorkflowId(consumerId),
          args: [
            {
              consumerId,
              subscriptionId: `sub-scale-${i}`,
              filter: {},
              initialStart: 'from_floor',
              leaseMs: 3_000,
              // The dead worker's leases are noticed by their missing heartbeat; keep that short.
              tuning: { heartbeatTimeoutMs: 2_000, maxActivityAttempts: 20, maxActivityRetryIntervalMs: 1_000 },
            },
          ],
          typedSearchAttributes: [
            { key: consumerIdSearchAttribute, value: consumerId },
            { key: phaseSearchAttribute, value: 'streaming' },
          ],
        }),
      ),
    );

    const exit = await waitFor(
      () => Promise.race([doomed.exited, new Promise<false>((r) => setTimeout(() => r(false), 200))]),
      { description: `the doomed worker to be killed at afterCommit:${crashAt}`, timeoutMs: 60_000 },
    ).catch((error: Error) => {
      throw new Error(`${error.message}\ndoomed worker stderr:\n${doomed.stderr.join('\n')}`);
    });
    expect(exit, `doomed worker stderr: ${doomed.stderr.join('\n')}`).toEqual({ code: null, signal: 'SIGKILL' });
    const subscriptionsAtDeath = server.subscriptions.length;
    const connectionsAtDeath = server.connections.slice();

    // Who ran which consumer at the kill: the worker identity of each pending streaming lease. The dead
    // worker's leases stay attributed to it until the survivor starts their retry (after the heartbeat timeout
    // and only once a slot of its own is free).
    const runningOn = await Promise.all(
      handles.map(async (handle) => {
        const { raw } = await handle.describe();
        const lease = raw.pendingActivities?.find((a) => a.activityType?.name === 'consumeStream');
        return lease?.lastWorkerIdentity ?? null;
      }),
    );
    const doomedConsumers = consumerIds.filter((_, i) => runningOn[i] === identityOf(doomed));
    const survivorConsumers = consumerIds.filter((_, i) => runningOn[i] === identityOf(survivor));
    expect(doomedConsumers.length, `leases ran on ${JSON.stringify(runningOn)}`).toBeGreaterThan(0);
    expect(survivorConsumers.length, `leases ran on ${JSON.stringify(runningOn)}`).toBeGreaterThan(0);

    const committedAtDeath = new Map(
      await Promise.all(
        doomedConsumers.map(async (id) => [id, (await loadCommitted(db.pool, id))?.position ?? null] as const),
      ),
    );
    // Mid-stream: the lease that crashed had committed past the crash point, short of the head.
    expect([...committedAtDeath.values()].some((p) => p !== null && p >= crashAt && p < journal.head)).toBe(true);
    const deadSessions = new Set(
      connectionsAtDeath.filter((c) => doomedConsumers.includes(c.consumerId ?? '')).map((c) => c.connectionId),
    );

    // Every consumer reaches the cut (the journal is static: its head), the dead worker's ones on the survivor.
    for (const consumerId of consumerIds) {
      await waitFor(async () => (await loadCommitted(db.pool, consumerId))?.position === journal.head, {
        description: `consumer ${consumerId} to commit the head ${journal.head}`,
        timeoutMs: 90_000,
      });
    }

    // The takeover resumed each of the dead worker's consumers from exactly its committed token.
    for (const consumerId of doomedConsumers) {
      const takeover = server.subscriptions.slice(subscriptionsAtDeath).find((s) => s.consumerId === consumerId);
      expect(takeover, `a takeover session for ${consumerId}`).toBeDefined();
      const position = committedAtDeath.get(consumerId) ?? null;
      if (position !== null) {
        expect(takeover!.mode).toBe('resume');
        expect(takeover!.startPosition).toBe(position);
      }
      expect(deadSessions.has(takeover!.connectionId)).toBe(false);
      // No ACK of a dead session was accepted once the takeover session existed.
      const takeoverOpened = server.connections.find((c) => c.connectionId === takeover!.connectionId)!.openedAt;
      const lateAcks = server.acks.filter((a) => deadSessions.has(a.connectionId) && a.at >= takeoverOpened);
      expect(lateAcks).toEqual([]);
    }
    // The dead worker's sockets are gone; no ACK anywhere was refused (one session per consumer at a time).
    expect(server.connections.filter((c) => deadSessions.has(c.connectionId) && !c.closed)).toEqual([]);
    expect(server.rejectedAcks).toEqual([]);

    // Every consumer's database equals a plain fold of the journal: each effect exactly once.
    const expected = foldExecutions(journal);
    for (const consumerId of consumerIds) {
      const saved = await savedEffects(db.pool, consumerId);
      expect(saved.executions, consumerId).toEqual(expected);
      expect(saved.receiptIds).toHaveLength(new Set(saved.receiptIds).size);
      expect((await consumerSummary(db.pool, consumerId))?.executions).toBe(expected.length);
    }

    await res.close(doomed.child);
    await Promise.all(handles.map((handle) => handle.terminate('test finished')));
    survivor.child.kill('SIGTERM');
    expect(await survivor.exited).toEqual({ code: 0, signal: null });
    await res.close(survivor.child);
    await res.close(testClient);
    await res.close(server);
    expect(
      [...doomed.lines, ...survivor.lines, ...doomed.stderr, ...survivor.stderr].filter((l) => l.includes(API_KEY)),
    ).toEqual([]);
  }, 180_000);
});
