// Whale alerts end to end: commits write them to the outbox, the dispatcher POSTs each to a local webhook with
// its Idempotency-Key, and a replay (the whole journal redelivered after a rebuilt history, then a restarted
// dispatcher) never calls the webhook again for a key. Failed calls back off and keep their key; a refused
// one is parked with its error recorded.
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { OutboxDispatcher } from '../../activities/outbox.js';
import type { WebhookBody } from '../../activities/webhook.js';
import { resolveGapUpdate } from '../../workflows/definitions.js';
import { useTestDatabase } from '../support/db.js';
import { useResources } from '../support/leaks.js';
import { waitFor } from '../support/temporal.js';
import { journalOf, trade, waitForPhase, withConsumerStack, within } from './consumer-harness.js';

const db = useTestDatabase();
const silent = {
  log: () => undefined,
  trace: () => undefined,
  debug: () => undefined,
  info: () => undefined,
  warn: () => undefined,
  error: () => undefined,
};

const SIGNING_SECRET = `whsec_${Buffer.alloc(32, 7).toString('base64')}`;
const dispatcherOptions = (webhookUrl: string) => ({
  pool: db.pool,
  webhookUrl,
  signingSecrets: [SIGNING_SECRET],
  log: silent,
  listen: false,
});

interface Received {
  key: string | undefined;
  body: WebhookBody;
}

/** A webhook receiver that records every call and answers `statusFor(call)` (200 by default). */
async function startWebhook(
  statusFor: (call: Received, nth: number) => number = () => 200,
): Promise<{ server: Server; url: string; calls: Received[] }> {
  const calls: Received[] = [];
  const server = createServer((req: IncomingMessage, res) => {
    let text = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (text += chunk));
    req.on('end', () => {
      const call: Received = {
        key: req.headers['idempotency-key'] as string | undefined,
        body: JSON.parse(text) as WebhookBody,
      };
      calls.push(call);
      res.writeHead(statusFor(call, calls.filter((c) => c.key === call.key).length)).end();
    });
  });
  await new Promise<void>((resolveListen) => server.listen(0, '127.0.0.1', resolveListen));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/alerts`, calls };
}

async function outboxRows(consumerId: string) {
  const { rows } = await db.pool.query<{
    idempotency_key: string;
    status: string;
    attempts: number;
    last_error: string | null;
  }>(
    'SELECT idempotency_key, status, attempts, last_error FROM outbox WHERE consumer_id = $1 ORDER BY idempotency_key',
    [consumerId],
  );
  return rows;
}

// 0.5*2 = 1, 0.5*4 = 2 and 0.9*10 = 9 reach the 1 USD threshold; 0.1*2 = 0.2 does not.
const TRADES = [
  trade('w1', 'mA', '0.5', '2'),
  trade('w2', 'mA', '0.5', '4'),
  trade('w3', 'mB', '0.1', '2'),
  trade('w4', 'mB', '0.9', '10'),
];

describe('outbox dispatcher', () => {
  const res = useResources();

  it('sends each whale alert once with its Idempotency-Key; a redelivered journal and a restarted dispatcher repeat nothing', async () => {
    const consumerId = 'alerts-1';
    const journal = journalOf(TRADES.map((event) => ({ events: [event] })));
    const webhook = await startWebhook();
    res.track(webhook.server);
    await withConsumerStack(
      res,
      db,
      { journal, env: { WHALE_ALERT_MIN_NOTIONAL: '1' } },
      async ({ server, startConsumer }) => {
        const handle = await startConsumer({ consumerId });
        await within(
          server.waitForAck((a) => a.consumerId === consumerId && a.position === 4),
          60_000,
          'the ACK of checkpoint 4',
        );

        const first = new OutboxDispatcher({ ...dispatcherOptions(webhook.url), idleMs: 50 });
        first.start();
        await waitFor(() => Promise.resolve(webhook.calls.length >= 3), {
          description: 'three alerts',
          timeoutMs: 30_000,
        });
        await first.stop();
        const keys = webhook.calls.map((c) => c.key).sort();
        const eventIds = webhook.calls.map((c) => c.body.eventId).sort();
        expect(keys).toEqual(eventIds.map((id) => `whale_alert:${id}`));
        expect(webhook.calls.map((c) => c.body.payload.entityId).sort()).toEqual(['w1', 'w2', 'w4']);
        expect(
          webhook.calls.every(
            (c) =>
              c.body.consumerId === consumerId && c.body.action === 'whale_alert' && c.key === c.body.idempotencyKey,
          ),
        ).toBe(true);
        expect((await outboxRows(consumerId)).map((r) => r.status)).toEqual(['done', 'done', 'done']);

        // The provider rebuilds its journal; from_floor redelivers every event, committed again as duplicates.
        journal.rebuildHistory();
        await waitForPhase(handle, 'awaiting_gap_decision');
        await handle.executeUpdate(resolveGapUpdate, {
          args: [{ decision: 'from_floor', actor: 'ops', reason: 'journal rebuilt' }],
        });
        await within(
          server.waitForAck(
            (a) =>
              a.consumerId === consumerId &&
              a.position === 4 &&
              server.subscriptions.filter((s) => s.consumerId === consumerId && s.mode === 'from_floor').length === 2,
          ),
          60_000,
          'the ACK of checkpoint 4 in the rebuilt history',
        );
      },
    );

    // A restarted dispatcher finds nothing due: no call is repeated, no row was added.
    await new OutboxDispatcher(dispatcherOptions(webhook.url)).drain();
    expect(webhook.calls).toHaveLength(3);
    expect(await outboxRows(consumerId)).toHaveLength(3);
    await res.close(webhook.server);
  });

  it('retries a failed call with the same key after its backoff and parks a refused one as dead with the error', async () => {
    const consumerId = 'alerts-2';
    const journal = journalOf(TRADES.map((event) => ({ events: [event] })));
    // w1's first call meets an outage (503), w2's receiver refuses it (400), w4 succeeds.
    const webhook = await startWebhook((call, nth) => {
      if (call.body.payload.entityId === 'w1' && nth === 1) return 503;
      if (call.body.payload.entityId === 'w2') return 400;
      return 200;
    });
    res.track(webhook.server);
    await withConsumerStack(
      res,
      db,
      { journal, env: { WHALE_ALERT_MIN_NOTIONAL: '1' } },
      async ({ server, startConsumer }) => {
        await startConsumer({ consumerId });
        await within(
          server.waitForAck((a) => a.consumerId === consumerId && a.position === 4),
          60_000,
          'the ACK of checkpoint 4',
        );
      },
    );

    const dispatcher = new OutboxDispatcher({ ...dispatcherOptions(webhook.url), maxAttempts: 5 });
    await dispatcher.drain();
    expect(webhook.calls).toHaveLength(3);
    const afterFirst = await outboxRows(consumerId);
    const byEntity = (entity: string) =>
      afterFirst.find((r) =>
        webhook.calls.some((c) => c.key === r.idempotency_key && c.body.payload.entityId === entity),
      )!;
    expect(byEntity('w1')).toMatchObject({
      status: 'pending',
      attempts: 1,
      last_error: expect.stringMatching(/HTTP 503/) as unknown,
    });
    expect(byEntity('w2')).toMatchObject({
      status: 'dead',
      attempts: 1,
      last_error: expect.stringMatching(/HTTP 400/) as unknown,
    });
    expect(byEntity('w4')).toMatchObject({ status: 'done' });
    // The error names the receiver by origin only: webhook paths often carry a secret.
    expect(byEntity('w1').last_error).not.toContain('/alerts');

    // Backing off: nothing is due yet. Once the backoff has passed (moved here instead of waited for), the retry
    // carries the same key.
    await dispatcher.drain();
    expect(webhook.calls).toHaveLength(3);
    await db.pool.query(`UPDATE outbox SET available_at = now() WHERE consumer_id = $1 AND status = 'pending'`, [
      consumerId,
    ]);
    await dispatcher.drain();
    const w1Calls = webhook.calls.filter((c) => c.body.payload.entityId === 'w1');
    expect(w1Calls).toHaveLength(2);
    expect(new Set(w1Calls.map((c) => c.key)).size).toBe(1);
    expect((await outboxRows(consumerId)).map((r) => r.status).sort()).toEqual(['dead', 'done', 'done']);
    await res.close(webhook.server);
  });
});
