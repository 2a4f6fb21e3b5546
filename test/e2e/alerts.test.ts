// Whale alerts on the real stack (Temporal, Postgres, the reference stream server, a receiver running the
// documented example): a consumer started from_floor over a history with whales, then live appends, sends
// exactly the live whales at or above the threshold and observed within the age bound, each once and signed;
// the replayed history, a late observation and a revised whale are recorded as suppressed. A backfill of the
// same history raises none, nor does the stream after its --then-stream handover. kill -9 of a worker process
// between a commit and its POST, and between a POST and its completion: every alert arrives, a repeat carries
// the same webhook-id / Idempotency-Key, and no key is ever in flight twice.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { OutboxDispatcher } from '../../activities/outbox.js';
import { loadCommitted } from '../../db/index.js';
import type { NewEvent } from '../../simulator/journal-types.js';
import { ReferenceStreamServer } from '../../simulator/server.js';
import type { consumerWorkflow } from '../../workflows/index.js';
import {
  backfillWorkflowId,
  consumerIdSearchAttribute,
  consumerWorkflowId,
  phaseSearchAttribute,
  resolveGapUpdate,
} from '../../workflows/definitions.js';
import { startAlertReceiver, type AlertReceiver } from '../support/alert-receiver.js';
import { runCli } from '../support/cli.js';
import { useTestDatabase } from '../support/db.js';
import { silentLogger } from '../support/silent-logger.js';
import { stopChildProcess, useResources, type Resources } from '../support/leaks.js';
import {
  createTestClient,
  sharedWorkflowBundlePath,
  temporalTarget,
  uniqueTaskQueue,
  waitFor,
} from '../support/temporal.js';
import { isJsonObject, spawnWorker } from '../support/worker-process.js';
import {
  API_KEY,
  correction,
  journalOf,
  testWorkerEnv,
  trade,
  waitForPhase,
  withConsumerStack,
  within,
} from './consumer-harness.js';
import { expectReplayable } from './replay-check.js';

const db = useTestDatabase();
const SECRET = `whsec_${Buffer.alloc(32, 0x17).toString('base64')}`;

/** Observed `agoMs` before now: what a live source delivers (the harness's trade() is observed in March). */
const live = (event: NewEvent, agoMs = 0): NewEvent => ({
  ...event,
  observedAt: new Date(Date.now() - agoMs).toISOString(),
});

async function receiver(res: Resources): Promise<AlertReceiver> {
  return res.track(await startAlertReceiver(SECRET), (r) => r.close(), 'alert receiver');
}

function inProcessDispatcher(res: Resources, url: string): OutboxDispatcher {
  const dispatcher = new OutboxDispatcher({
    pool: db.pool,
    webhookUrl: url,
    signingSecrets: [SECRET],
    log: silentLogger,
  });
  dispatcher.start();
  return res.track(dispatcher, (d) => d.stop(), 'outbox dispatcher');
}

/** Every outbox row of a consumer as [entityId, status or suppressed reason], in commit order. */
async function outboxOf(consumerId: string): Promise<[string, string][]> {
  const { rows } = await db.pool.query<{ entity: string; status: string; reason: string | null }>(
    `SELECT payload->>'entityId' AS entity, status, suppressed_reason AS reason
       FROM outbox WHERE consumer_id = $1 ORDER BY id`,
    [consumerId],
  );
  return rows.map((r) => [r.entity, r.reason ?? r.status]);
}

/** Whale ≥ 1 USD: 0.5 × 4 = 2, 0.9 × 10 = 9; minnows: 0.1 × 2 = 0.2. */
const HISTORY = [
  { events: [trade('h-whale', 'mA', '0.5', '4')] },
  { events: [trade('h-minnow', 'mA', '0.1', '2')] },
  { events: [trade('h-whale-2', 'mB', '0.9', '10'), trade('h-minnow-2', 'mB', '0.1', '2')] },
];

describe('whale alerts', () => {
  const res = useResources();

  it('sends exactly the live whales within the age bound, each once and signed; replayed, late and revised whales are recorded as suppressed', async () => {
    const consumerId = 'alerts-live';
    const journal = journalOf(HISTORY);
    const webhook = await receiver(res);
    await withConsumerStack(
      res,
      db,
      { journal, env: { WHALE_ALERT_MIN_NOTIONAL: '1', WHALE_ALERT_MAX_AGE: '5m' } },
      async ({ server, startConsumer }) => {
        const dispatcher = inProcessDispatcher(res, webhook.url);
        const handle = await startConsumer({ consumerId });
        await within(
          server.waitForAck((a) => a.consumerId === consumerId && a.position === journal.head),
          60_000,
          'the replay of the history',
        );
        journal.append({ events: [live(trade('l-whale', 'mA', '0.5', '4'))] });
        journal.append({ events: [live(trade('l-minnow', 'mA', '0.1', '2'))] });
        // Delivered live, but observed ten minutes ago: a late observation, not a signal.
        journal.append({ events: [live(trade('l-late', 'mB', '0.9', '10'), 10 * 60_000)] });
        // A minnow of the history corrected into a whale, live: it crosses the threshold now.
        journal.append({ events: [live(correction('h-minnow', 'mA', 2, '0.9', '10'))] });
        // A whale revised while still a whale: the same trade, not a new signal.
        journal.append({ events: [live(correction('l-whale', 'mA', 2, '0.6', '4'))] });
        await within(
          server.waitForAck((a) => a.consumerId === consumerId && a.position === journal.head),
          60_000,
          'the live appends',
        );
        // Claimed is in flight: the POST has not been answered yet.
        await waitFor(
          async () => (await outboxOf(consumerId)).every(([, state]) => !['pending', 'claimed'].includes(state)),
          {
            description: 'every alert sent',
            timeoutMs: 30_000,
          },
        );
        expect(await outboxOf(consumerId)).toEqual([
          ['h-whale', 'replay'],
          ['h-whale-2', 'replay'],
          ['l-whale', 'done'],
          ['l-late', 'late'],
          ['h-minnow', 'done'],
          ['l-whale', 'correction'],
        ]);
        await res.close(dispatcher);

        // Exactly the two live signals reached the receiver, each once, verified by the documented recipe.
        expect(webhook.alerts.map(({ alert }) => [alert.payload.entityId, alert.payload.kind])).toEqual([
          ['l-whale', 'trade'],
          ['h-minnow', 'correction'],
        ]);
        expect(webhook.deliveries.map((d) => d.status)).toEqual([204, 204]);
        for (const { alert, id } of webhook.alerts) {
          expect(id).toBe(`whale_alert:${alert.eventId}`);
          expect(alert).toMatchObject({ consumerId, action: 'whale_alert', idempotencyKey: id });
          expect(alert.payload).toMatchObject({ delivery: 'live' });
        }
        expect(webhook.deliveries.every((d) => d.key === d.id)).toBe(true);

        // The provider rebuilds its journal; from_floor redelivers every event as a duplicate: nothing new.
        journal.rebuildHistory();
        await waitForPhase(handle, 'awaiting_gap_decision');
        await handle.executeUpdate(resolveGapUpdate, {
          args: [{ decision: 'from_floor', actor: 'ops', reason: 'journal rebuilt' }],
        });
        await within(
          server.waitForAck(
            (a) =>
              a.consumerId === consumerId &&
              a.position === journal.head &&
              server.subscriptions.filter((s) => s.consumerId === consumerId && s.mode === 'from_floor').length === 2,
          ),
          60_000,
          'the replay of the rebuilt history',
        );
      },
    );
    expect(await outboxOf(consumerId)).toHaveLength(6);
    // A restarted dispatcher finds nothing due.
    await new OutboxDispatcher({
      pool: db.pool,
      webhookUrl: webhook.url,
      signingSecrets: [SECRET],
      log: silentLogger,
      listen: false,
    }).drain();
    expect(webhook.deliveries).toHaveLength(2);
    await res.close(webhook);
  });

  it('a backfill of the history raises none, nor does the stream after its --then-stream handover; a live whale then does', async () => {
    const consumerId = 'alerts-backfill';
    const journal = journalOf(HISTORY);
    const webhook = await receiver(res);
    const env = { WHALE_ALERT_MIN_NOTIONAL: '1', PAGE_LIMIT: '2', PAGE_CHUNK_SIZE: '2', RECONNECT_MAX_ATTEMPTS: '2' };
    await withConsumerStack(res, db, { journal, env }, async (stack) => {
      const dispatcher = inProcessDispatcher(res, webhook.url);
      const started = await runCli(
        {
          TEMPORAL_ADDRESS: temporalTarget().address,
          TEMPORAL_NAMESPACE: temporalTarget().namespace,
          TASK_QUEUE: stack.taskQueue,
          DATABASE_URL: db.url,
        },
        ...['backfill', '--consumer', consumerId, '--filter', '{}', '--then-stream', '--detach'],
      );
      expect(started, started.stderr).toMatchObject({ code: 0 });
      const backfill = stack.client.workflow.getHandle(backfillWorkflowId(consumerId));
      stack.track(backfill);
      await backfill.result();
      expect(await outboxOf(consumerId)).toEqual([
        ['h-whale', 'backfill'],
        ['h-whale-2', 'backfill'],
      ]);
      stack.track(stack.client.workflow.getHandle(consumerWorkflowId(consumerId)));
      // The stream replays from the floor over what the backfill applied: duplicates, no alert row at all.
      await waitFor(async () => (await loadCommitted(db.pool, consumerId))?.position === journal.head, {
        description: 'the stream consumer to commit the history',
        timeoutMs: 60_000,
      });
      journal.append({ events: [live(trade('l-after-handover', 'mB', '0.9', '10'))] });
      await waitFor(() => Promise.resolve(webhook.alerts.length === 1), {
        description: 'the live whale after the handover',
        timeoutMs: 30_000,
      });
      await res.close(dispatcher);
      expect(webhook.alerts.map(({ alert }) => alert.payload.entityId)).toEqual(['l-after-handover']);
      expect(webhook.deliveries).toHaveLength(1);
      expect(await outboxOf(consumerId)).toEqual([
        ['h-whale', 'backfill'],
        ['h-whale-2', 'backfill'],
        ['l-after-handover', 'done'],
      ]);
    });
    await res.close(webhook);
  });

  it('kill -9 between a commit and its POST, and between a POST and its completion: every alert arrives, a repeat under the same key', async () => {
    const consumerId = `alerts-kill-${randomUUID()}`;
    const journal = journalOf(HISTORY);
    const server = res.track(
      await ReferenceStreamServer.start({ journal, apiKeys: [API_KEY], checkpointEvery: 2 }),
      (s) => s.close(),
      'reference stream',
    );
    const testClient = res.track(await createTestClient());
    const taskQueue = uniqueTaskQueue('alerts-kill');
    // The receiver holds every call until the worker is gone: the first POST is in flight when it dies.
    const webhook = await receiver(res);
    webhook.answer = () => 'hang';
    const env = {
      ...testWorkerEnv({ databaseUrl: db.url, taskQueue, streamUrl: server.url, apiKey: API_KEY }),
      WORKFLOW_BUNDLE_PATH: sharedWorkflowBundlePath(),
      LOG_LEVEL: 'INFO',
      WHALE_ALERT_MIN_NOTIONAL: '1',
      WHALE_ALERT_WEBHOOK_URL: webhook.url,
      WHALE_ALERT_SIGNING_SECRET: SECRET,
      // One call at a time: the other alerts are committed (or claimed) but not POSTed when the worker dies.
      WHALE_ALERT_CONCURRENCY: '1',
      // A claim's lease is three timeouts: 3 s before the survivor may take the dead worker's claims.
      WHALE_ALERT_TIMEOUT: '1s',
    };
    const doomed = spawnWorker(env);
    res.track(doomed.child, (c) => stopChildProcess(c), 'worker process (killed)');
    const handle = await testClient.client.workflow.start<typeof consumerWorkflow>('consumerWorkflow', {
      taskQueue,
      workflowId: consumerWorkflowId(consumerId),
      args: [
        {
          consumerId,
          subscriptionId: 'sub-alerts-kill',
          filter: {},
          initialStart: 'from_floor',
          leaseMs: 3_000,
          tuning: { heartbeatTimeoutMs: 2_000 },
        },
      ],
      typedSearchAttributes: [
        { key: consumerIdSearchAttribute, value: consumerId },
        { key: phaseSearchAttribute, value: 'streaming' },
      ],
    });
    await within(
      server.waitForAck((a) => a.consumerId === consumerId && a.position === journal.head),
      60_000,
      'the replay of the history',
    );
    for (const whale of ['k-1', 'k-2', 'k-3']) journal.append({ events: [live(trade(whale, 'mA', '0.5', '4'))] });
    const keys = await waitFor(
      async () => {
        const { rows } = await db.pool.query<{ key: string }>(
          `SELECT idempotency_key AS key FROM outbox WHERE consumer_id = $1 AND suppressed_reason IS NULL ORDER BY id`,
          [consumerId],
        );
        return rows.length === 3 && webhook.arrivals.length === 1 && rows.map((r) => r.key);
      },
      { description: 'three alerts committed, the first POST held by the receiver', timeoutMs: 60_000 },
    );
    doomed.child.kill('SIGKILL');
    expect(await doomed.exited).toEqual({ code: null, signal: 'SIGKILL' });
    await res.close(doomed.child);
    // The held call died with its worker: nothing was acknowledged to it.
    await waitFor(() => Promise.resolve(webhook.deliveries.length === 1), {
      description: 'the held call to close',
      timeoutMs: 10_000,
    });
    expect(webhook.deliveries).toEqual([{ id: keys[0], key: keys[0], status: 0 }]);

    webhook.answer = () => ({});
    const survivor = spawnWorker(env);
    res.track(survivor.child, (c) => stopChildProcess(c), 'worker process');
    await waitFor(
      async () => {
        const { rows } = await db.pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM outbox WHERE consumer_id = $1 AND status = 'done'`,
          [consumerId],
        );
        return rows[0]!.n === 3;
      },
      { description: 'every alert sent and completed by the survivor', timeoutMs: 60_000 },
    );
    expect(webhook.alerts.map((a) => a.id).sort()).toEqual([...keys].sort());
    // The call that died is repeated under its key; the others, committed but never POSTed, arrive once each.
    const deliveredIds = webhook.deliveries.map((d) => d.id);
    expect(deliveredIds.filter((id) => id === keys[0])).toHaveLength(2);
    expect(deliveredIds.filter((id) => id !== keys[0]).sort()).toEqual(keys.slice(1).sort());
    expect(webhook.deliveries.every((d) => d.key === d.id)).toBe(true);
    expect(webhook.overlaps).toEqual([]);

    await handle.terminate('test finished');
    survivor.child.kill('SIGTERM');
    expect(await survivor.exited).toEqual({ code: 0, signal: null });
    await res.close(survivor.child);
    const lines = [...doomed.lines, ...survivor.lines, ...doomed.stderr, ...survivor.stderr];
    expect([...doomed.lines, ...survivor.lines].filter((line) => !isJsonObject(line))).toEqual([]);
    // Neither the stream key, the signing secret nor the webhook URL's secret part is ever logged.
    expect(lines.filter((l) => l.includes(API_KEY) || l.includes(SECRET.slice(6)) || l.includes('s3cr3t'))).toEqual([]);
    await res.close(testClient);
    await res.close(server);
    await res.close(webhook);
  });

  it('every recorded history replays and holds no API key', async () => {
    await expectReplayable();
  });
});
