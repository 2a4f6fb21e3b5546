// Takeover with the production defaults, whatever the worker running the lease does (issue 18): it is killed
// (kill -9), frozen between commits (SIGSTOP), or frozen inside a commit (its commit waits on the checkpoint row,
// held from another session, when it is stopped). A standby worker polls all along; after each stop the test
// measures the time to the standby's first commit, continues a frozen worker and checks that it commits and ACKs
// nothing, and starts a replacement, so every stop faces two workers as in production. At the end the consumer is at
// the head with effects equal to a plain fold of the journal, and `status` keeps every run's work in its totals.
//
// TAKEOVER_PLAN (e.g. `kill:20,freeze:10,freeze-in-commit:10`) sets the stops; `npm run bench -- takeover` runs it
// that way and reads the times this test writes to TAKEOVER_RESULTS. The suite's default plan is one of each.
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import type { WorkflowHandle } from '@temporalio/client';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { loadCommitted } from '../../db/index.js';
import { Journal } from '../../simulator/journal.js';
import { ReferenceStreamServer } from '../../simulator/server.js';
import type { consumerWorkflow } from '../../workflows/index.js';
import { consumerIdSearchAttribute, consumerWorkflowId, phaseSearchAttribute } from '../../workflows/definitions.js';
import { foldExecutions, savedEffects } from '../db/consume-stream-support.js';
import { runCli } from '../support/cli.js';
import { useTestDatabase } from '../support/db.js';
import { stopChildProcess, useResources } from '../support/leaks.js';
import { spawnWorker, type WorkerProcess } from '../support/worker-process.js';
import { createTestClient, sharedWorkflowBundlePath, uniqueTaskQueue, waitFor } from '../support/temporal.js';
import { testWorkerEnv } from './consumer-harness.js';

export type StopKind = 'kill' | 'freeze' | 'freeze-in-commit';

/** One measured takeover: the stop, the standby's lease (its epoch bump) and its first commit. */
export interface TakeoverSample {
  kind: StopKind;
  /** stop → the standby's first commit */
  takeoverMs: number;
  /** stop → the standby's lease (the epoch bump) */
  leaseMs: number;
  /** Where the time went: each attempt of the lease seen after the stop, when (ms after it) and on which worker. */
  attempts: { atMs: number; attempt: number; pid: number; onStopped: boolean }[];
}

const API_KEY = `wh-takeover-secret-${randomUUID()}`;
const PLAN = parsePlan(process.env.TAKEOVER_PLAN ?? 'kill:1,freeze:1,freeze-in-commit:1');
const db = useTestDatabase();

describe('takeover with the production defaults', () => {
  const res = useResources();

  it(
    `${PLAN.join(', ')}: each stop is taken over by the standby, a frozen worker commits and ACKs nothing once continued`,
    async () => {
      const consumerId = `takeover-${randomUUID().slice(0, 8)}`;
      const journal = Journal.generate({ seed: 977, transitions: 20 });
      const server = res.track(
        await ReferenceStreamServer.start({ journal, apiKeys: [API_KEY], checkpointEvery: 3 }),
        (s) => s.close(),
        'reference stream',
      );
      const testClient = res.track(await createTestClient());
      const taskQueue = uniqueTaskQueue('takeover');
      // The production defaults (heartbeat timeout, heartbeat interval, database bounds); only the reconnect
      // backoff is short, so a superseded session's reconnects do not slow the test.
      const { HEARTBEAT_MS: _testHeartbeat, ...harnessEnv } = testWorkerEnv({
        databaseUrl: db.url,
        taskQueue,
        streamUrl: server.url,
        apiKey: API_KEY,
      });
      const env = { ...harnessEnv, WORKFLOW_BUNDLE_PATH: sharedWorkflowBundlePath(), LOG_LEVEL: 'INFO' };
      const cliEnv = { ...env, LOG_LEVEL: 'ERROR' };
      const rowLocker = res.track(new pg.Client({ connectionString: db.url }), (c) => c.end(), 'row locker');
      await rowLocker.connect();

      const workers = [spawnWorker(env), spawnWorker(env)];
      for (const w of workers) res.track(w.child, (c) => stopChildProcess(c), 'worker process');
      const handle = await testClient.client.workflow.start<typeof consumerWorkflow>('consumerWorkflow', {
        taskQueue,
        workflowId: consumerWorkflowId(consumerId),
        args: [
          {
            consumerId,
            subscriptionId: 'sub-takeover',
            filter: {},
            initialStart: 'from_floor',
            // Longer than the test: every run ends by a stop, none by its lease.
            leaseMs: 3_600_000,
          },
        ],
        typedSearchAttributes: [
          { key: consumerIdSearchAttribute, value: consumerId },
          { key: phaseSearchAttribute, value: 'streaming' },
        ],
      });

      const samples: TakeoverSample[] = [];
      for (const [index, kind] of PLAN.entries()) {
        const label = `${kind} #${index + 1}`;
        // Progress on the holder: new transitions are committed and ACKed before it stops.
        for (let i = 0; i < 3; i++) journal.appendGenerated();
        await waitFor(() => Promise.resolve(ackedUpTo(server, consumerId) === journal.head), {
          description: `the ACK of ${journal.head} before ${label}`,
          timeoutMs: 60_000,
        });
        const holder = await leaseHolderPid(handle);
        const doomed = workers.find((w) => w.child.pid === holder);
        if (!doomed) throw new Error(`the lease runs on pid ${holder}, not on one of this test's workers`);
        const before = await checkpointRow(db.pool, consumerId);
        const holderConnections = new Set(server.connections.map((c) => c.connectionId));

        let stoppedAt: number;
        if (kind === 'kill') {
          doomed.child.kill('SIGKILL');
          stoppedAt = Date.now();
        } else if (kind === 'freeze') {
          doomed.child.kill('SIGSTOP');
          stoppedAt = Date.now();
          await waitForProcessState(doomed, 'T');
        } else {
          // The holder's next commit waits on the row this session holds; it is stopped while it waits, then the
          // row is let go, so the frozen holder's transaction owns the row (or has given up on it) meanwhile.
          await rowLocker.query('BEGIN');
          await rowLocker.query('SELECT 1 FROM checkpoints WHERE consumer_id = $1 FOR UPDATE', [consumerId]);
          for (let i = 0; i < 3; i++) journal.appendGenerated();
          await waitFor(() => commitWaitsOnLock(db.pool), {
            description: `the holder's commit waiting on the checkpoint row (${label})`,
            timeoutMs: 30_000,
          });
          doomed.child.kill('SIGSTOP');
          stoppedAt = Date.now();
          await waitForProcessState(doomed, 'T');
          await rowLocker.query('COMMIT');
        }
        // A live feed while the standby takes over, as in production: its first commit follows its lease at once.
        const feed = setInterval(() => journal.appendGenerated(), 200);
        const attempts = watchAttempts(handle, stoppedAt);
        const taken = await waitForStandbyCommit(db.pool, consumerId, before.leaseEpoch, label).finally(() =>
          clearInterval(feed),
        );
        const seen = await attempts.stop();
        samples.push({
          kind,
          takeoverMs: taken.committedAt - stoppedAt,
          leaseMs: taken.leasedAt - stoppedAt,
          attempts: seen.map((a) => ({ ...a, onStopped: a.pid === doomed.child.pid })),
        });

        if (kind === 'kill') {
          await doomed.exited;
        } else {
          // Continued, the frozen worker learns it lost the lease; until it has, and after, it ACKs nothing on its
          // sessions and commits nothing (every commit since the takeover is the standby's epoch or later).
          const continuedAt = Date.now();
          const linesBefore = doomed.lines.length;
          doomed.child.kill('SIGCONT');
          await waitFor(() => Promise.resolve(lostLeaseLogged(doomed, linesBefore)), {
            description: `the continued worker to give up its run (${label})`,
            timeoutMs: 60_000,
          });
          const staleAcks = server.acks.filter(
            (a) =>
              a.consumerId === consumerId && holderConnections.has(a.connectionId) && a.at.getTime() >= continuedAt,
          );
          expect(staleAcks, `ACKs on the frozen worker's sessions after it continued (${label})`).toEqual([]);
          // It took no lease back: a retried attempt it had taken while frozen is refused (lease refused).
          // Any lease it starts from now on is a later attempt (after a timeout of the standby's), never the one the
          // standby took over from or one the server retried while it was frozen.
          const takeoverAttempt = seen.find((a) => a.pid !== doomed.child.pid)?.attempt ?? Infinity;
          const startedSince = doomed.lines
            .slice(linesBefore)
            .filter((line) => line.includes('"lease started"'))
            .map((line) => (JSON.parse(line) as { attempt: number }).attempt);
          expect(startedSince.filter((attempt) => attempt <= takeoverAttempt)).toEqual([]);
          doomed.child.kill('SIGKILL');
          await doomed.exited;
        }
        await res.close(doomed.child);
        const replacement = spawnWorker(env);
        res.track(replacement.child, (c) => stopChildProcess(c), 'worker process');
        workers.splice(workers.indexOf(doomed), 1, replacement);
        // The next stop faces a standby that polls.
        await waitFor(() => Promise.resolve(replacement.lines.some((line) => line.includes('"worker running"'))), {
          description: `the replacement worker after ${label} to run`,
          timeoutMs: 60_000,
        });
      }

      await waitFor(async () => (await loadCommitted(db.pool, consumerId))?.position === journal.head, {
        description: `the consumer to commit the head ${journal.head}`,
        timeoutMs: 60_000,
      });
      const saved = await savedEffects(db.pool, consumerId);
      expect(saved.executions).toEqual(foldExecutions(journal));
      expect(saved.receiptIds).toHaveLength(new Set(saved.receiptIds).size);

      // Every ACK the server took was for a checkpoint the database holds, or one before it.
      const committed = (await loadCommitted(db.pool, consumerId))!;
      expect(Math.max(...server.acks.filter((a) => a.consumerId === consumerId).map((a) => a.position))).toBe(
        committed.position,
      );

      // `status` answers after the takeovers, and names the last one (asked again while a query lands on a worker
      // this test has just stopped).
      await waitFor(
        async () => {
          const status = await runCli(cliEnv, 'status', '--consumer', consumerId, '--json');
          const report = JSON.parse(status.stdout) as { status: { lastError: string | null } | null };
          return /^streaming run lost its worker \(heartbeat timeout\); attempt \d+/.test(
            report.status?.lastError ?? '',
          );
        },
        { description: 'status naming the last takeover', timeoutMs: 60_000 },
      );

      await handle.terminate('test finished');
      for (const w of workers) {
        w.child.kill('SIGTERM');
        await w.exited;
        await res.close(w.child);
      }
      await res.close(rowLocker);
      await res.close(testClient);
      await res.close(server);

      if (process.env.TAKEOVER_RESULTS) {
        await writeFile(process.env.TAKEOVER_RESULTS, `${JSON.stringify({ plan: PLAN, samples }, null, 2)}\n`);
      }
    },
    60_000 + PLAN.length * 40_000,
  );
});

function parsePlan(text: string): StopKind[] {
  return text.split(',').flatMap((part) => {
    const [kind, count] = part.trim().split(':');
    if (kind !== 'kill' && kind !== 'freeze' && kind !== 'freeze-in-commit') {
      throw new Error(`TAKEOVER_PLAN: unknown stop ${kind} (kill, freeze or freeze-in-commit)`);
    }
    return Array.from({ length: Number(count ?? 1) }, () => kind);
  });
}

function ackedUpTo(server: ReferenceStreamServer, consumerId: string): number {
  return Math.max(-1, ...server.acks.filter((a) => a.consumerId === consumerId).map((a) => a.position));
}

/** The pid of the worker running the streaming activity (a worker's identity starts with `pid@host`). */
async function leaseHolderPid(handle: WorkflowHandle): Promise<number> {
  const identity = (await handle.describe()).raw.pendingActivities?.[0]?.lastWorkerIdentity ?? '';
  return Number(identity.split('@')[0]);
}

async function checkpointRow(pool: pg.Pool, consumerId: string): Promise<{ leaseEpoch: number; version: number }> {
  const { rows } = await pool.query<{ lease_epoch: number; version: number }>(
    'SELECT lease_epoch, version FROM checkpoints WHERE consumer_id = $1',
    [consumerId],
  );
  return { leaseEpoch: rows[0]!.lease_epoch, version: rows[0]!.version };
}

/** A session of the worker waits on a row lock (the holder's commit behind the test's lock). */
async function commitWaitsOnLock(pool: pg.Pool): Promise<boolean> {
  const { rows } = await pool.query<{ waiting: number }>(
    `SELECT count(*)::int AS waiting FROM pg_stat_activity
      WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()`,
  );
  return rows[0]!.waiting > 0;
}

/** Records each new attempt of the pending lease (describe every 100 ms) until stopped. */
function watchAttempts(
  handle: WorkflowHandle,
  since: number,
): { stop(): Promise<{ atMs: number; attempt: number; pid: number }[]> } {
  const seen: { atMs: number; attempt: number; pid: number }[] = [];
  let watching = true;
  const done = (async () => {
    while (watching) {
      const pending = (await handle.describe()).raw.pendingActivities?.[0];
      const pid = Number((pending?.lastWorkerIdentity ?? '').split('@')[0]);
      const attempt = pending?.attempt ?? 0;
      // An attempt counts once it has started (on a worker); a scheduled one has no worker yet.
      if (pending?.lastStartedTime && (seen.at(-1)?.attempt !== attempt || seen.at(-1)?.pid !== pid)) {
        seen.push({ atMs: Date.now() - since, attempt, pid });
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  })();
  return {
    async stop() {
      watching = false;
      await done;
      return seen;
    },
  };
}

/** Polls the checkpoint row: the first epoch past `epoch` (the standby's lease), then that epoch's first commit. */
async function waitForStandbyCommit(
  pool: pg.Pool,
  consumerId: string,
  epoch: number,
  label: string,
): Promise<{ leasedAt: number; committedAt: number }> {
  let leased: { at: number; version: number; epoch: number } | null = null;
  return waitFor(
    async () => {
      const row = await checkpointRow(pool, consumerId);
      const now = Date.now();
      if (row.leaseEpoch > epoch && (leased === null || row.leaseEpoch !== leased.epoch)) {
        leased = { at: now, version: row.version, epoch: row.leaseEpoch };
        return undefined;
      }
      if (leased !== null && row.leaseEpoch === leased.epoch && row.version > leased.version) {
        return { leasedAt: leased.at, committedAt: now };
      }
      return undefined;
    },
    { description: `the standby's first commit after ${label}`, timeoutMs: 120_000, intervalMs: 25 },
  );
}

/** The process state letter of /proc/<pid>/stat (T: stopped). */
async function waitForProcessState(worker: WorkerProcess, state: string): Promise<void> {
  await waitFor(
    () => Promise.resolve(readFileSync(`/proc/${worker.child.pid}/stat`, 'utf8').split(') ')[1]?.startsWith(state)),
    { description: `process ${worker.child.pid} in state ${state}`, timeoutMs: 10_000 },
  );
}

/** The worker logged, since line `from`, the end of its run: its lease lost to a newer attempt, or refused. */
function lostLeaseLogged(worker: WorkerProcess, from: number): boolean {
  return worker.lines.slice(from).some((line) => /commit fenced|lease ended|lease refused|lease lost/i.test(line));
}
