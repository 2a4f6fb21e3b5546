// kill -9 of a real worker process at each cut point of a checkpoint (after staging, after the commit before
// its ACK, after the ACK), then a fresh worker process: every effect exactly once (equal to a plain fold of
// the journal), the resumed session starts from the committed token, and the workflow goes on leasing
// normally, and the restarted worker's outbox dispatcher sends every whale alert exactly once (history alerts:
// WHALE_ALERT_ON_REPLAY). The worker is
// the compiled `dist/worker/main.js` as operators run it, crashed by its test-only WHALEHUNT_TEST_CRASH_AT.
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { consumerSummary, loadCommitted } from '../../db/index.js';
import { addDecimal, compareDecimal, formatDecimal, notional, parseDecimal } from '../../protocol/decimal.js';
import { Journal } from '../../simulator/journal.js';
import { ReferenceStreamServer } from '../../simulator/server.js';
import type { consumerWorkflow } from '../../workflows/index.js';
import {
  consumerIdSearchAttribute,
  consumerWorkflowId,
  phaseSearchAttribute,
  statusQuery,
} from '../../workflows/definitions.js';
import { foldExecutions, savedEffects } from '../db/consume-stream-support.js';
import { useTestDatabase } from '../support/db.js';
import { stopChildProcess, useResources } from '../support/leaks.js';
import { createTestClient, sharedWorkflowBundlePath, uniqueTaskQueue, waitFor } from '../support/temporal.js';
import { testWorkerEnv } from './consumer-harness.js';
import { isJsonObject, spawnWorker } from '../support/worker-process.js';

const API_KEY = `wh-kill-secret-${randomUUID()}`;
const db = useTestDatabase();

const WHALE_MIN = '250';

/**
 * The whale alerts a plain fold of the journal raises with WHALE_ALERT_ON_REPLAY (the journal is replayed): one
 * per applied trade at or above the threshold, and per applied correction that lifts its execution across it.
 */
function expectedAlertKeys(journal: Journal): string[] {
  const latest = new Map<string, { revision: number; whale: boolean }>();
  const keys: string[] = [];
  for (let i = 0; journal.at(i); i++) {
    for (const event of journal.at(i)!.events) {
      const saved = latest.get(event.entityId);
      const applies =
        event.kind === 'trade' ? saved === undefined : saved !== undefined && event.revision > saved.revision;
      if (!applies) continue;
      const data = event.data as { price: string; size: string };
      const whale = compareDecimal(parseDecimal(notional(data.price, data.size)), parseDecimal(WHALE_MIN)) >= 0;
      latest.set(event.entityId, { revision: event.revision, whale });
      if (whale && !saved?.whale) keys.push(`whale_alert:${event.eventId}`);
    }
  }
  return keys.sort();
}

async function startWebhook() {
  const keys: string[] = [];
  const server = createServer((req, res) => {
    keys.push(String(req.headers['idempotency-key']));
    req.resume().on('end', () => res.writeHead(204).end());
  });
  await new Promise<void>((resolveListen) => server.listen(0, '127.0.0.1', resolveListen));
  return { server, keys, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/whale-alerts` };
}

function totalNotional(executions: { notional: string }[]): string {
  return formatDecimal(executions.reduce((sum, e) => addDecimal(sum, parseDecimal(e.notional)), parseDecimal('0')));
}

const CUT_POINTS = [
  // Mid-staging: batches of the next checkpoint staged, nothing committed for them.
  { point: 'afterStage', at: 23 },
  // The commit of checkpoint 20 is durable, its ACK was never sent: the local token is authoritative.
  { point: 'afterCommit', at: 20 },
  // Committed and ACKed: nothing to redo (but what a group commit covered beyond it).
  { point: 'afterAck', at: 30 },
] as const;

describe('kill -9 of the worker process at each cut point', () => {
  const res = useResources();

  it.each(CUT_POINTS)(
    '$point at $at: exactly-once effects and a resume from the committed token',
    async ({ point, at }) => {
      const consumerId = `kill-${point}`;
      const journal = Journal.generate({ seed: 4242, transitions: 60 });
      const server = res.track(
        await ReferenceStreamServer.start({ journal, apiKeys: [API_KEY], checkpointEvery: 5 }),
        (s) => s.close(),
        'reference stream',
      );
      const testClient = res.track(await createTestClient());
      const taskQueue = uniqueTaskQueue('kill');
      const env = {
        ...testWorkerEnv({ databaseUrl: db.url, taskQueue, streamUrl: server.url, apiKey: API_KEY }),
        WORKFLOW_BUNDLE_PATH: sharedWorkflowBundlePath(),
        LOG_LEVEL: 'INFO',
        WHALE_ALERT_MIN_NOTIONAL: WHALE_MIN,
        // The journal is replayed from the floor: history alerts only when asked to.
        WHALE_ALERT_ON_REPLAY: 'true',
      };
      // Only the surviving worker gets a webhook: its dispatcher sends the alerts both workers' commits wrote.
      const webhook = await startWebhook();
      res.track(webhook.server);

      const doomed = spawnWorker({ ...env, WHALEHUNT_TEST_CRASH_AT: `${point}:${at}` });
      res.track(doomed.child, (c) => stopChildProcess(c), 'worker process (crashing)');
      const handle = await testClient.client.workflow.start<typeof consumerWorkflow>('consumerWorkflow', {
        taskQueue,
        workflowId: consumerWorkflowId(`${consumerId}-${randomUUID()}`),
        args: [
          {
            consumerId,
            subscriptionId: 'sub-kill',
            filter: {},
            initialStart: 'from_floor',
            leaseMs: 3_000,
            // The killed attempt is noticed by its missing heartbeat; keep that short.
            tuning: { heartbeatTimeoutMs: 2_000 },
          },
        ],
        typedSearchAttributes: [
          { key: consumerIdSearchAttribute, value: consumerId },
          { key: phaseSearchAttribute, value: 'streaming' },
        ],
      });

      const crash = await waitFor(
        () => Promise.race([doomed.exited, new Promise<false>((r) => setTimeout(() => r(false), 200))]),
        {
          description: `the worker to crash at ${point}:${at}`,
          timeoutMs: 60_000,
        },
      ).catch((error: Error) => {
        throw new Error(
          `${error.message}\nworker stdout:\n${doomed.lines.slice(-15).join('\n')}\nstderr:\n${doomed.stderr.join('\n')}`,
        );
      });
      await res.close(doomed.child);
      expect(crash, `worker stderr: ${doomed.stderr.join('\n')}`).toEqual({ code: null, signal: 'SIGKILL' });

      const committedAtCrash = await loadCommitted(db.pool, consumerId);
      const crashPosition = committedAtCrash?.position ?? null;
      const acksBeforeRestart = server.acks.filter((a) => a.consumerId === consumerId).map((a) => a.position);
      const subscriptionsBeforeRestart = server.subscriptions.length;
      if (point === 'afterStage') {
        // The staged batch at `at` was never committed.
        expect(crashPosition).toBeLessThan(at);
        expect(acksBeforeRestart.every((p) => p < at)).toBe(true);
      } else {
        expect(crashPosition).toBeGreaterThanOrEqual(at);
        const crashedAt = crashPosition!;
        if (point === 'afterCommit') expect(acksBeforeRestart).not.toContain(crashedAt);
        else {
          // ACKed at the cut point; a group commit covering it may have committed later checkpoints, unACKed yet.
          expect(acksBeforeRestart.some((p) => p >= at)).toBe(true);
          expect(acksBeforeRestart.every((p) => p <= crashedAt)).toBe(true);
        }
      }

      const survivor = spawnWorker({
        ...env,
        WHALE_ALERT_WEBHOOK_URL: webhook.url,
        WHALE_ALERT_SIGNING_SECRET: `whsec_${Buffer.alloc(32, 9).toString('base64')}`,
      });
      res.track(survivor.child, (c) => stopChildProcess(c), 'worker process');
      // The new attempt resumes from exactly the committed checkpoint, whatever the server last saw ACKed.
      const resumed = await waitFor(
        () =>
          Promise.resolve(
            server.subscriptions.slice(subscriptionsBeforeRestart).find((s) => s.consumerId === consumerId),
          ),
        { description: 'the resumed subscription', timeoutMs: 60_000 },
      );
      expect(resumed.mode).toBe('resume');
      expect(resumed.startPosition).toBe(crashPosition);

      await waitFor(async () => (await loadCommitted(db.pool, consumerId))?.position === journal.head, {
        description: `the consumer to commit the head ${journal.head}`,
        timeoutMs: 60_000,
      });
      const expected = foldExecutions(journal);
      const saved = await savedEffects(db.pool, consumerId);
      expect(saved.executions).toEqual(expected);
      expect(saved.receiptIds).toHaveLength(new Set(saved.receiptIds).size);
      const summary = await consumerSummary(db.pool, consumerId);
      expect(summary?.executions).toBe(expected.length);
      expect(summary?.totalVolume).toBe(totalNotional(expected));

      const alertKeys = expectedAlertKeys(journal);
      expect(alertKeys.length).toBeGreaterThan(0);
      await waitFor(() => Promise.resolve(webhook.keys.length >= alertKeys.length), {
        description: `${alertKeys.length} whale alerts`,
        timeoutMs: 30_000,
      });
      expect([...webhook.keys].sort()).toEqual(alertKeys);

      // The lease loop goes on normally: further leases end and start again, no stop, no error.
      // (Counted in the history: a query now would first wait out the dead worker's sticky queue.)
      const completedLeases = async () =>
        (await handle.fetchHistory()).events?.filter((e) => e.activityTaskCompletedEventAttributes).length ?? 0;
      const before = await completedLeases();
      await waitFor(async () => (await completedLeases()) >= before + 2, {
        description: 'two more leases to complete',
        timeoutMs: 30_000,
      });
      const later = await handle.query(statusQuery);
      expect(later.phase).toBe('streaming');
      expect(later.stop).toBeNull();
      await handle.terminate('test finished');

      // SIGTERM: a graceful shutdown exits 0.
      survivor.child.kill('SIGTERM');
      expect(await survivor.exited).toEqual({ code: 0, signal: null });
      await res.close(survivor.child);
      await res.close(testClient);
      await res.close(server);
      await res.close(webhook.server);
      // Nothing sent twice, also after the worker's shutdown.
      expect([...webhook.keys].sort()).toEqual(alertKeys);

      // Structured logs only, and never the key.
      expect([...doomed.lines, ...survivor.lines].filter((line) => !isJsonObject(line))).toEqual([]);
      expect(
        [...doomed.lines, ...survivor.lines, ...doomed.stderr, ...survivor.stderr].filter((l) => l.includes(API_KEY)),
      ).toEqual([]);
      expect(survivor.lines.some((l) => l.includes('"worker stopped"'))).toBe(true);
    },
  );
});
