// The real worker process against a failing database. (1) A Postgres of the test's own restarted mid-stream,
// once kept down longer than the heartbeat timeout: the worker stays up, logs each outage once, resumes, and
// the database ends equal to a plain fold of the journal; no ACK ever precedes its commit. (2) A worker frozen
// (SIGSTOP) inside a commit, holding the checkpoint row lock: the server ends its session, the next attempt on a
// live worker leases within the lock timeout + 3 s of starting, and the woken zombie neither commits nor ACKs.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { createPool, loadCommitted } from '../../db/index.js';
import { Journal } from '../../simulator/journal.js';
import { ReferenceStreamServer } from '../../simulator/server.js';
import type { consumerWorkflow } from '../../workflows/index.js';
import { consumerIdSearchAttribute, consumerWorkflowId, phaseSearchAttribute } from '../../workflows/definitions.js';
import { foldExecutions, savedEffects } from '../db/consume-stream-support.js';
import { useTestDatabase } from '../support/db.js';
import { stopChildProcess, useResources, type Resources } from '../support/leaks.js';
import { startRestartablePostgres } from '../support/restartable-postgres.js';
import { createTestClient, sharedWorkflowBundlePath, uniqueTaskQueue, waitFor } from '../support/temporal.js';
import { logLinesWith, nonJsonLines, spawnWorker, type WorkerProcess } from '../support/worker-process.js';
import { testWorkerEnv } from './consumer-harness.js';

const API_KEY = `wh-dbfaults-secret-${randomUUID()}`;
const db = useTestDatabase();

const HEARTBEAT_TIMEOUT_MS = 4_000;
const BOUNDS_ENV = {
  DB_LOCK_TIMEOUT_MS: '1000',
  DB_STATEMENT_TIMEOUT_MS: '2000',
  DB_IDLE_IN_TRANSACTION_TIMEOUT_MS: '1500',
};
const LOCK_TIMEOUT_MS = Number(BOUNDS_ENV.DB_LOCK_TIMEOUT_MS);
const CONNECTION_LOST = 'database connection lost; runs retry from the committed checkpoint until it is back';

async function startStack(res: Resources, journal: Journal, databaseUrl: string) {
  const server = res.track(
    await ReferenceStreamServer.start({ journal, apiKeys: [API_KEY], checkpointEvery: 5 }),
    (s) => s.close(),
    'reference stream',
  );
  const testClient = res.track(await createTestClient());
  const taskQueue = uniqueTaskQueue('dbfaults');
  const env = {
    ...testWorkerEnv({ databaseUrl, taskQueue, streamUrl: server.url, apiKey: API_KEY }),
    ...BOUNDS_ENV,
    WORKFLOW_BUNDLE_PATH: sharedWorkflowBundlePath(),
    LOG_LEVEL: 'INFO',
  };
  const startConsumer = (consumerId: string, leaseMs: number) =>
    testClient.client.workflow.start<typeof consumerWorkflow>('consumerWorkflow', {
      taskQueue,
      workflowId: consumerWorkflowId(`${consumerId}-${randomUUID()}`),
      args: [
        {
          consumerId,
          subscriptionId: `sub-${consumerId}`,
          filter: {},
          initialStart: 'from_floor',
          leaseMs,
          tuning: {
            heartbeatTimeoutMs: HEARTBEAT_TIMEOUT_MS,
            // Enough attempts to outlast the longest outage without the workflow's own backoff (issue 8 §3).
            maxActivityAttempts: 100,
            maxActivityRetryIntervalMs: 1_000,
          },
        },
      ],
      typedSearchAttributes: [
        { key: consumerIdSearchAttribute, value: consumerId },
        { key: phaseSearchAttribute, value: 'streaming' },
      ],
    });
  return { server, testClient, env, startConsumer };
}

function spawnTracked(res: Resources, env: Record<string, string>, label: string): WorkerProcess {
  const worker = spawnWorker(env);
  res.track(worker.child, (c) => stopChildProcess(c), label);
  return worker;
}

function maxAckedPosition(server: ReferenceStreamServer, consumerId: string): number {
  return Math.max(0, ...server.acks.filter((a) => a.consumerId === consumerId).map((a) => a.position));
}

describe('the worker process against a failing database', () => {
  const res = useResources();

  it('survives Postgres restarts mid-stream (one longer than the heartbeat timeout) and ends equal to the fold', async () => {
    const postgres = res.track(await startRestartablePostgres(), (p) => p.close(), 'restartable postgres');
    const pool = res.track(createPool(postgres.url, { max: 2 }), (p) => p.end(), 'test pool');
    const consumerId = 'restarts';
    const journal = Journal.generate({ seed: 808, transitions: 40 });
    const stack = await startStack(res, journal, postgres.url);
    const worker = spawnTracked(res, stack.env, 'worker process');
    const handle = await stack.startConsumer(consumerId, 3_000);
    journal.startLiveAppends(10);

    const committedPosition = async () => (await loadCommitted(pool, consumerId))?.position ?? 0;
    const restarts = [{ longerThanHeartbeat: false }, { longerThanHeartbeat: true }, { longerThanHeartbeat: false }];
    let lastPosition = 0;
    for (const { longerThanHeartbeat } of restarts) {
      // Mid-stream: the consumer has committed since the last restart.
      lastPosition = await waitFor(
        async () => ((await committedPosition()) > lastPosition ? committedPosition() : false),
        {
          description: `a commit past ${lastPosition}`,
          timeoutMs: 90_000,
        },
      );
      await postgres.stop();
      const stoppedAt = Date.now();
      if (longerThanHeartbeat) {
        // Streaming runs scheduled so far: the workflow starts each retry as a new run (one attempt each).
        const scheduledRuns = async () =>
          (await handle.fetchHistory()).events?.filter((event) => event.activityTaskScheduledEventAttributes).length ??
          0;
        const runsAtStop = await scheduledRuns();
        // Down past a heartbeat timeout, and until the workflow has retried the run against the missing database.
        await waitFor(
          async () => Date.now() - stoppedAt > HEARTBEAT_TIMEOUT_MS + 1_000 && (await scheduledRuns()) > runsAtStop + 1,
          { description: 'retried runs while the database is down', timeoutMs: 60_000 },
        );
      }
      // Every ACK the server saw was committed first: the database, back, holds at least that position.
      const acked = maxAckedPosition(stack.server, consumerId);
      await postgres.start();
      expect(await committedPosition()).toBeGreaterThanOrEqual(acked);
      expect(worker.child.exitCode).toBeNull();
    }
    journal.stopLiveAppends();

    await waitFor(async () => (await committedPosition()) === journal.head, {
      description: `the consumer to commit the head ${journal.head}`,
      timeoutMs: 90_000,
    });
    const saved = await savedEffects(pool, consumerId);
    expect(saved.executions).toEqual(foldExecutions(journal));
    expect(saved.receiptIds).toHaveLength(new Set(saved.receiptIds).size);
    expect(maxAckedPosition(stack.server, consumerId)).toBeLessThanOrEqual(journal.head);

    // The worker stayed up all along; one clear line per outage; nothing but JSON lines; no raw stack.
    expect(worker.child.exitCode).toBeNull();
    // (An outage that finds no connection open, e.g. between two attempts, has nothing to lose: the attempt's
    // failure to connect is what gets reported then.)
    const lostLines = logLinesWith(worker, CONNECTION_LOST).length;
    expect(lostLines).toBeGreaterThanOrEqual(1);
    expect(lostLines).toBeLessThanOrEqual(restarts.length);
    expect(nonJsonLines(worker)).toEqual([]);
    expect(worker.stderr.filter((l) => /Unhandled|error event/i.test(l))).toEqual([]);

    await handle.terminate('test finished');
    worker.child.kill('SIGTERM');
    expect(await worker.exited).toEqual({ code: 0, signal: null });
    await res.close(worker.child);
    await res.close(stack.testClient);
    await res.close(stack.server);
    await res.close(pool);
    await res.close(postgres);
  });

  it('a worker frozen inside a commit holds no lock past its bound: the next live attempt leases at once; woken, the zombie neither commits nor ACKs', async () => {
    const consumerId = 'frozen';
    const journal = Journal.generate({ seed: 909, transitions: 20 });
    const stack = await startStack(res, journal, db.url);
    const freezeFrom = journal.head + 1;
    // A long lease: the run stays on the zombie until it freezes.
    const zombie = spawnTracked(
      res,
      { ...stack.env, WHALEHUNT_TEST_FREEZE_IN_COMMIT_AT: String(freezeFrom) },
      'worker process (to freeze)',
    );
    const handle = await stack.startConsumer(consumerId, 120_000);
    await waitFor(async () => (await loadCommitted(db.pool, consumerId))?.position === journal.head, {
      description: `the first worker to commit ${journal.head}`,
      timeoutMs: 90_000,
    });
    const zombieLease = (await loadCommitted(db.pool, consumerId))!.leaseEpoch;
    const zombieConnections = new Set(
      stack.server.subscriptions.filter((s) => s.consumerId === consumerId).map((s) => s.connectionId),
    );

    // A second worker polls, then new events make the first one commit, and freeze inside that commit.
    const survivor = spawnTracked(res, stack.env, 'worker process');
    await waitFor(() => Promise.resolve(logLinesWith(survivor, 'worker running').length > 0), {
      description: 'the second worker to run',
      timeoutMs: 90_000,
    });
    for (let i = 0; i < 10; i++) journal.appendGenerated();
    const [frozenLine] = await waitFor(
      () => {
        const found = logLinesWith(zombie, 'test freeze point reached: SIGSTOP with the checkpoint row locked');
        return Promise.resolve(found.length > 0 ? found : false);
      },
      { description: 'the first worker to freeze inside its commit', timeoutMs: 60_000 },
    );
    const frozenAt = Date.parse(String(frozenLine!.time));

    const takenOver = await waitFor(
      async () => ((await loadCommitted(db.pool, consumerId))!.leaseEpoch > zombieLease ? Date.now() : false),
      { description: 'another attempt to take the lease', timeoutMs: 60_000, intervalMs: 50 },
    );
    const takeoverMs = takenOver - frozenAt;
    const pending = (await handle.describe()).raw.pendingActivities?.[0];
    const started = pending?.lastStartedTime;
    const attemptStartedAt = Number(started?.seconds ?? 0) * 1_000 + Math.floor((started?.nanos ?? 0) / 1e6);
    // The database's share: the attempt that took over waited on no lock the frozen worker held (its session was
    // ended by idle_in_transaction_session_timeout), so it leased within the lock timeout + 3 s of starting.
    // (Retries Temporal hands to the frozen worker's still-open task polls are lost until their own heartbeat
    // timeout: that share of the total is the worker's polling, not the database's.)
    console.info(
      `takeover ${takeoverMs} ms after the freeze, ${takenOver - attemptStartedAt} ms after attempt ${pending?.attempt} started on ${pending?.lastWorkerIdentity} (frozen pid ${zombie.child.pid})`,
    );
    expect(pending?.lastWorkerIdentity).toContain(String(survivor.child.pid));
    expect(takenOver - attemptStartedAt).toBeLessThanOrEqual(LOCK_TIMEOUT_MS + 3_000);
    await waitFor(async () => (await loadCommitted(db.pool, consumerId))?.position === journal.head, {
      description: `the second worker to commit ${journal.head}`,
      timeoutMs: 60_000,
    });

    // Woken, the zombie finds its session ended by the server: the commit fails, its connection closes unACKed.
    zombie.child.kill('SIGCONT');
    await waitFor(() => Promise.resolve(logLinesWith(zombie, CONNECTION_LOST).length > 0), {
      description: 'the woken worker to notice its session is gone',
      timeoutMs: 30_000,
    });
    await waitFor(
      () =>
        Promise.resolve(
          stack.server.connections.filter((c) => zombieConnections.has(c.connectionId)).every((c) => c.closed),
        ),
      { description: "the woken worker's stream connection to close", timeoutMs: 30_000 },
    );
    const zombieAcksPastFreeze = stack.server.acks.filter(
      (a) => zombieConnections.has(a.connectionId) && a.position >= freezeFrom,
    );
    expect(zombieAcksPastFreeze).toEqual([]);
    const saved = await savedEffects(db.pool, consumerId);
    expect(saved.executions).toEqual(foldExecutions(journal));
    expect(saved.receiptIds).toHaveLength(new Set(saved.receiptIds).size);
    // The zombie's lease stays fenced: the saved lease is the survivor's.
    expect((await loadCommitted(db.pool, consumerId))!.leaseEpoch).toBeGreaterThan(zombieLease);
    expect(zombie.child.exitCode).toBeNull();
    expect(nonJsonLines(zombie)).toEqual([]);

    await handle.terminate('test finished');
    await res.close(zombie.child);
    await res.close(survivor.child);
    await res.close(stack.testClient);
    await res.close(stack.server);
  });
});
