// The real worker process against a failing database. (1) A Postgres of the test's own stopped mid-stream for 5 s,
// 30 s and 90 s: each time the consumer commits again within 5 s of Postgres accepting connections, the worker
// stays up and logs one "lost" and one "restored" line per outage, no ACK precedes its commit; then a protocol
// violation on every session and a kill -9 of the worker: the database ends equal to a plain fold of the journal,
// and `status --json` and Current Details count exactly its committed checkpoints and applied events. (2) A worker
// frozen (SIGSTOP) inside a commit, holding the checkpoint row lock: the server ends its session, the next attempt
// on a live worker leases within the lock timeout + 3 s of starting, and the woken zombie neither commits nor ACKs.
import { randomUUID } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import type { WorkflowHandle } from '@temporalio/client';
import { describe, expect, it } from 'vitest';
import { acceptsConnections, createPool, loadCommitted } from '../../db/index.js';
import { Journal } from '../../simulator/journal.js';
import { ReferenceStreamServer } from '../../simulator/server.js';
import type { consumerWorkflow } from '../../workflows/index.js';
import type { ConsumerTotals } from '../../workflows/consumer-state.js';
import {
  consumerIdSearchAttribute,
  consumerWorkflowId,
  phaseSearchAttribute,
  statusQuery,
} from '../../workflows/definitions.js';
import { allEvents, foldExecutions, savedEffects } from '../db/consume-stream-support.js';
import { appliedEvents } from '../db/reference-fold.js';
import { runCli } from '../support/cli.js';
import { useTestDatabase } from '../support/db.js';
import { stopChildProcess, useResources, type Resources } from '../support/leaks.js';
import { startRestartablePostgres } from '../support/restartable-postgres.js';
import {
  createTestClient,
  sharedWorkflowBundlePath,
  temporalTarget,
  uniqueTaskQueue,
  waitFor,
  waitForQuery,
} from '../support/temporal.js';
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
const CONNECTION_RESTORED = 'database connection restored';

async function currentDetails(handle: WorkflowHandle): Promise<string> {
  const metadata = await handle.query<{ currentDetails?: string }>('__temporal_workflow_metadata');
  return metadata.currentDetails ?? '';
}

const count = (text: string): number => Number(text.replace(/,/g, ''));

/** Current Details' version (last commit row) and database totals (totals row). */
function detailsTotals(details: string): { version: number; checkpoints: number; events: number } | null {
  const commit = /\| last commit \| [^|]*, version ([\d,]+);/.exec(details);
  const totals = /\| totals \| ([\d,]+) checkpoints, ([\d,]+) events,/.exec(details);
  if (!commit || !totals) return null;
  return { version: count(commit[1]!), checkpoints: count(totals[1]!), events: count(totals[2]!) };
}

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
      // The consumer's own workflow id: `status --consumer` finds it by that.
      workflowId: consumerWorkflowId(consumerId),
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
  return { server, testClient, env, taskQueue, startConsumer };
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

  it("back within 5 s of each Postgres outage (5 s, 30 s, 90 s), one lost and one restored line each; after them, a recurring protocol violation and a kill -9, the totals are the database's", async () => {
    const postgres = res.track(await startRestartablePostgres(), (p) => p.close(), 'restartable postgres');
    const pool = res.track(createPool(postgres.url, { max: 2 }), (p) => p.end(), 'test pool');
    const consumerId = 'outages';
    const journal = Journal.generate({ seed: 808, transitions: 40 });
    const stack = await startStack(res, journal, postgres.url);
    const env = { ...stack.env, RECONNECT_MAX_ATTEMPTS: '2' };
    let worker = spawnTracked(res, env, 'worker process');
    const handle = await stack.startConsumer(consumerId, 3_000);
    journal.startLiveAppends(10);

    const committed = async () => (await loadCommitted(pool, consumerId)) ?? { position: 0, version: 0 };
    const outages: { downMs: number; stoppingAt: number; startedAt: number }[] = [];
    for (const downMs of [5_000, 30_000, 90_000]) {
      // Mid-stream: the consumer has committed since the last outage.
      const before = (await committed()).version;
      await waitFor(async () => (await committed()).version > before, {
        description: `a commit past version ${before}`,
        timeoutMs: 60_000,
      });
      const stoppingAt = Date.now();
      await postgres.stop();
      // The outage's length is what is tested, not a wait for something to happen.
      await delay(downMs);
      // Every ACK the server saw was committed first: the database, back, holds at least that position.
      const acked = maxAckedPosition(stack.server, consumerId);
      const startedAt = Date.now();
      await postgres.start();
      // pg_isready's question: does it accept a connection? Then the first commit of the consumer after that.
      const acceptingAt = await waitFor(() => acceptsConnections(postgres.url, 1_000).then((ok) => ok && Date.now()), {
        description: 'Postgres to accept connections',
        timeoutMs: 30_000,
        intervalMs: 50,
      });
      const back = await committed();
      expect(back.position).toBeGreaterThanOrEqual(acked);
      const firstCommitAt = await waitFor(async () => (await committed()).version > back.version && Date.now(), {
        description: `the first commit after the ${downMs / 1000} s outage`,
        timeoutMs: 30_000,
        intervalMs: 50,
      });
      console.info(
        `outage of ${downMs / 1000} s: first commit ${firstCommitAt - acceptingAt} ms after Postgres accepted`,
      );
      expect(firstCommitAt - acceptingAt).toBeLessThanOrEqual(5_000);
      expect(worker.child.exitCode).toBeNull();
      outages.push({ downMs, stoppingAt, startedAt });
    }

    // One line when the database was lost (seen by whatever touched it first, a commit in flight included) and one
    // when it was back, per outage, each inside its outage.
    const lost = logLinesWith(worker, CONNECTION_LOST).map((l) => Date.parse(String(l.time)));
    const restored = logLinesWith(worker, CONNECTION_RESTORED);
    expect(lost).toHaveLength(outages.length);
    expect(restored).toHaveLength(outages.length);
    for (const [i, outage] of outages.entries()) {
      expect(lost[i]).toBeGreaterThanOrEqual(outage.stoppingAt);
      expect(lost[i]).toBeLessThanOrEqual(outage.startedAt);
      expect(Date.parse(String(restored[i]!.time))).toBeGreaterThanOrEqual(outage.startedAt);
      expect(restored[i]!.downMs).toBeGreaterThanOrEqual(outage.downMs - 1_000);
    }

    // A protocol violation on every session: runs fail and back off; their sessions count all the same.
    const faultsBefore = (await handle.query(statusQuery)).faultsWithoutProgress ?? 0;
    stack.server.faults.frameSequence = { mode: 'skip', atFrame: 4, everySession: true };
    await waitForQuery(handle, statusQuery, (s) => (s.faultsWithoutProgress ?? 0) >= faultsBefore + 2, {
      description: 'two runs failed by the protocol violation',
      timeoutMs: 60_000,
    });
    stack.server.faults.frameSequence = undefined;

    // kill -9 mid-stream; a fresh worker takes over after the heartbeat timeout.
    const beforeKill = (await committed()).version;
    await waitFor(async () => (await committed()).version > beforeKill, {
      description: 'a commit after the protocol violation',
      timeoutMs: 60_000,
    });
    const sessionsBeforeKill = stack.server.connections.filter((c) => c.consumerId === consumerId).length;
    worker.child.kill('SIGKILL');
    await worker.exited;
    await res.close(worker.child);
    worker = spawnTracked(res, env, 'worker process (after the kill)');
    journal.stopLiveAppends();

    await waitFor(async () => (await committed()).position === journal.head, {
      description: `the consumer to commit the head ${journal.head}`,
      timeoutMs: 90_000,
    });
    const saved = await savedEffects(pool, consumerId);
    expect(saved.executions).toEqual(foldExecutions(journal));
    expect(saved.receiptIds).toHaveLength(new Set(saved.receiptIds).size);
    expect(maxAckedPosition(stack.server, consumerId)).toBeLessThanOrEqual(journal.head);

    // The database's committed checkpoints (no decision moved the version) and applied events (one receipt each):
    // `status --json` and Current Details say the same, whatever ended the runs that did them.
    const applied = appliedEvents(allEvents(journal)).length;
    const version = (await committed()).version;
    expect(saved.state.receipts.filter((r) => r.outcome === 'applied')).toHaveLength(applied);
    const cli = {
      TEMPORAL_ADDRESS: temporalTarget().address,
      TEMPORAL_NAMESPACE: temporalTarget().namespace,
      TASK_QUEUE: stack.taskQueue,
      DATABASE_URL: postgres.url,
    };
    // The kill may land after the head was committed: the workflow then answers only once a live worker picks it up
    // (the one started after the kill may still be starting), and until then `status` reports the database and the
    // last heartbeat alone. Asked again until the workflow answers, as an operator would.
    const { statusRun, report } = await waitFor(
      async () => {
        const run = await runCli(cli, 'status', '--consumer', consumerId, '--json');
        expect(run, run.stderr).toMatchObject({ code: 0 });
        const parsed = JSON.parse(run.stdout) as {
          status: unknown;
          totals: ConsumerTotals;
          database: { state: { version: number } };
        };
        return parsed.status === null ? undefined : { statusRun: run, report: parsed };
      },
      { description: 'the workflow to answer `status` after the kill', timeoutMs: 60_000 },
    );
    expect(report.totals).toMatchObject({ checkpointsCommitted: version, eventsApplied: applied, version });
    // The faulted runs' sessions were counted (a kill -9 loses at most its run's last unreported session).
    expect(report.totals.sessions, statusRun.stdout).toBeGreaterThanOrEqual(sessionsBeforeKill - 1);
    expect(report.totals.sessions).toBeLessThanOrEqual(
      stack.server.connections.filter((c) => c.consumerId === consumerId).length,
    );
    // The workflow itself (Current Details, the status query) has the same figures once a run reported them.
    await waitFor(
      async () => {
        const totals = detailsTotals(await currentDetails(handle));
        return (
          totals !== null && totals.checkpoints === version && totals.events === applied && totals.version === version
        );
      },
      { description: "Current Details with the database's totals", timeoutMs: 30_000, intervalMs: 250 },
    );

    expect(worker.child.exitCode).toBeNull();
    expect(nonJsonLines(worker)).toEqual([]);
    await handle.terminate('test finished');
    worker.child.kill('SIGTERM');
    expect(await worker.exited).toEqual({ code: 0, signal: null });
    await res.close(worker.child);
    await res.close(stack.testClient);
    await res.close(stack.server);
    await res.close(pool);
    await res.close(postgres);
  }, 360_000);

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
