// Recovery after kill -9 does not degrade with repetition (issue 8 §3): the worker process running the streaming
// lease is killed again and again, and every time the next run is scheduled as soon as the attempt times out — no
// timer, no growing backoff — and the standby worker resumes from the committed token (two workers run, as in
// production; a replacement starts after each takeover). `status` right after each takeover answers and keeps the
// killed run's work in its totals. At the end the consumer is at the head with effects equal to a plain fold of the
// journal. The takeover times are measured by `npm run bench -- takeover` (TAKEOVER_RESULTS names the file this
// test writes them to); the test asserts the history's shape, not durations.
import { randomUUID } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import type { WorkflowHandle } from '@temporalio/client';
import { describe, expect, it } from 'vitest';
import { loadCommitted } from '../../db/index.js';
import { Journal } from '../../simulator/journal.js';
import { ReferenceStreamServer } from '../../simulator/server.js';
import type { consumerWorkflow } from '../../workflows/index.js';
import { consumerIdSearchAttribute, consumerWorkflowId, phaseSearchAttribute } from '../../workflows/definitions.js';
import { foldExecutions, savedEffects } from '../db/consume-stream-support.js';
import { streamHeartbeat } from '../../cli/consumers.js';
import { runCli } from '../support/cli.js';
import { useTestDatabase } from '../support/db.js';
import { stopChildProcess, useResources } from '../support/leaks.js';
import { spawnWorker } from '../support/worker-process.js';
import { createTestClient, sharedWorkflowBundlePath, uniqueTaskQueue, waitFor } from '../support/temporal.js';
import { testWorkerEnv } from './consumer-harness.js';

const API_KEY = `wh-takeover-secret-${randomUUID()}`;
const KILLS = Number(process.env.TAKEOVER_KILLS ?? 4);
const HEARTBEAT_TIMEOUT_MS = Number(process.env.TAKEOVER_HEARTBEAT_TIMEOUT_MS ?? 3_000);
const db = useTestDatabase();

describe('repeated kill -9 of the worker running the lease', () => {
  const res = useResources();

  it(
    `${KILLS} kills: every takeover follows the timeout at once, and the consumer ends at the head exactly once`,
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
      const env = {
        ...testWorkerEnv({ databaseUrl: db.url, taskQueue, streamUrl: server.url, apiKey: API_KEY }),
        WORKFLOW_BUNDLE_PATH: sharedWorkflowBundlePath(),
        LOG_LEVEL: 'WARN',
      };
      const cliEnv = { ...env, LOG_LEVEL: 'ERROR' };
      const connectionsOf = () => server.connections.filter((c) => c.consumerId === consumerId);

      // Two workers, as in production: a standby already polls when the one running the lease dies, and a
      // replacement is started after each takeover.
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
            // Longer than the test: every run ends by a kill, none by its lease.
            leaseMs: 600_000,
            tuning: { heartbeatTimeoutMs: HEARTBEAT_TIMEOUT_MS },
          },
        ],
        typedSearchAttributes: [
          { key: consumerIdSearchAttribute, value: consumerId },
          { key: phaseSearchAttribute, value: 'streaming' },
        ],
      });

      /** kill → the next session's connection, per kill */
      const takeoverMs: number[] = [];
      for (let kill = 1; kill <= KILLS; kill++) {
        // Progress on this worker: new transitions are committed and ACKed before it dies.
        for (let i = 0; i < 3; i++) journal.appendGenerated();
        const head = journal.head;
        await waitFor(
          () => Promise.resolve(server.acks.some((a) => a.consumerId === consumerId && a.position === head)),
          {
            description: `the ACK of ${head} before kill ${kill}`,
            timeoutMs: 60_000,
          },
        );
        // The run's heartbeat names that commit, so the workflow learns what the run did before it dies.
        await waitFor(async () => streamHeartbeat(await handle.describe())?.position === head, {
          description: `the heartbeat of position ${head} before kill ${kill}`,
          timeoutMs: 30_000,
        });
        const holder = await leaseHolder(handle);
        const doomed = workers.find((w) => w.child.pid === holder);
        if (!doomed) throw new Error(`the lease runs on pid ${holder}, not on one of this test's workers`);
        const sessionsBefore = connectionsOf().length;
        doomed.child.kill('SIGKILL');
        const killedAt = Date.now();
        await doomed.exited;
        await res.close(doomed.child);
        const next = await waitFor(() => Promise.resolve(connectionsOf()[sessionsBefore]), {
          description: `the session taking over after kill ${kill}`,
          timeoutMs: 60_000,
        });
        const replacement = spawnWorker(env);
        res.track(replacement.child, (c) => stopChildProcess(c), 'worker process');
        workers.splice(workers.indexOf(doomed), 1, replacement);
        takeoverMs.push(next.openedAt.getTime() - killedAt);

        // `status` right after the takeover: the workflow answers through the new worker, and the totals keep
        // the killed run's work (its last heartbeat) instead of restarting from the new run's.
        const status = await runCli(cliEnv, 'status', '--consumer', consumerId, '--json');
        expect(status.code, status.stderr).toBe(0);
        const report = JSON.parse(status.stdout) as StatusJson;
        expect(report.statusError).toBeNull();
        expect(report.status?.phase).toBe('streaming');
        expect(report.status?.lastError).toMatch(/^streaming run lost its worker \(heartbeat timeout\)/);
        expect(Date.parse(report.status?.lastErrorAt ?? '')).toBeGreaterThanOrEqual(killedAt - 1_000);
        expect(report.totals?.sessions).toBeGreaterThanOrEqual(kill);
        expect(report.totals?.checkpointsCommitted).toBeGreaterThanOrEqual(kill);
        expect(report.totals?.acksSent).toBeGreaterThanOrEqual(kill);
      }

      await waitFor(async () => (await loadCommitted(db.pool, consumerId))?.position === journal.head, {
        description: `the consumer to commit the head ${journal.head}`,
        timeoutMs: 60_000,
      });
      const saved = await savedEffects(db.pool, consumerId);
      expect(saved.executions).toEqual(foldExecutions(journal));
      expect(saved.receiptIds).toHaveLength(new Set(saved.receiptIds).size);

      // Every timed-out attempt is followed by the next run's schedule, with no timer (backoff) in between.
      const events = (await handle.fetchHistory()).events ?? [];
      const timedOut = events.flatMap((e, i) => (e.activityTaskTimedOutEventAttributes ? [i] : []));
      expect(timedOut).toHaveLength(KILLS);
      for (const index of timedOut) {
        const timeout = events[index]!.activityTaskTimedOutEventAttributes!.failure?.timeoutFailureInfo?.timeoutType;
        expect(timeout).toBe(temporalHeartbeatTimeout);
        const next = events
          .slice(index + 1)
          .find((e) => e.timerStartedEventAttributes || e.activityTaskScheduledEventAttributes);
        expect(
          next?.activityTaskScheduledEventAttributes,
          `the command after the timeout at event ${index + 1}`,
        ).toBeTruthy();
      }
      expect(events.some((e) => e.timerStartedEventAttributes)).toBe(false);
      await handle.terminate('test finished');
      for (const w of workers) {
        w.child.kill('SIGTERM');
        await w.exited;
        await res.close(w.child);
      }
      await res.close(testClient);
      await res.close(server);

      if (process.env.TAKEOVER_RESULTS) {
        await writeFile(
          process.env.TAKEOVER_RESULTS,
          `${JSON.stringify({ kills: KILLS, heartbeatTimeoutMs: HEARTBEAT_TIMEOUT_MS, takeoverMs }, null, 2)}\n`,
        );
      }
      // Each kill waits out a heartbeat timeout, a `status` CLI run and a worker process start.
    },
    60_000 + KILLS * 25_000,
  );
});

/** The pid of the worker running the streaming activity (the SDK's default identity is `pid@host`). */
async function leaseHolder(handle: WorkflowHandle): Promise<number> {
  const identity = (await handle.describe()).raw.pendingActivities?.[0]?.lastWorkerIdentity ?? '';
  return Number(identity.split('@')[0]);
}

/** The parts of `status --json` this test reads. */
interface StatusJson {
  statusError: string | null;
  status: { phase: string; lastError: string | null; lastErrorAt: string | null } | null;
  totals: { sessions: number; checkpointsCommitted: number; acksSent: number } | null;
}

/** temporal.api.enums.v1.TimeoutType.TIMEOUT_TYPE_HEARTBEAT */
const temporalHeartbeatTimeout = 4;
