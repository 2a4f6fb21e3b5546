// The outbox dispatcher against real Postgres and a real HTTP receiver running the documented receiver example
// (docs/examples/alert-receiver.ts): a commit's NOTIFY wakes it long before its poll; two dispatchers with
// short leases never POST one key at the same time and deliver every alert; a receiver that fails for a while,
// hangs past the timeout or refuses the call gets retries with the same key, then a dead row with its error
// (never the URL's secret) that `alerts list` shows, and `alerts retry` sends it again under the same webhook-id.
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { OutboxDispatcher, type OutboxDispatcherOptions } from '../../activities/outbox.js';
import { main } from '../../cli/main.js';
import { listOutbox } from '../../db/index.js';
import { startAlertReceiver, type AlertReceiver, type Answer } from '../support/alert-receiver.js';
import { useTestDatabase } from '../support/db.js';
import { silentLogger } from '../support/silent-logger.js';
import { waitFor } from '../support/temporal.js';

const db = useTestDatabase();
const SECRET = `whsec_${Buffer.alloc(32, 0x42).toString('base64')}`;

const open: { receivers: AlertReceiver[]; dispatchers: OutboxDispatcher[] } = { receivers: [], dispatchers: [] };
afterEach(async () => {
  await Promise.all(open.dispatchers.splice(0).map((d) => d.stop()));
  await Promise.all(open.receivers.splice(0).map((r) => r.close()));
});

async function receiver(answer?: Answer): Promise<AlertReceiver> {
  const started = await startAlertReceiver(SECRET, answer);
  open.receivers.push(started);
  return started;
}

function dispatcher(url: string, options: Partial<OutboxDispatcherOptions> = {}): OutboxDispatcher {
  return new OutboxDispatcher({
    pool: db.pool,
    webhookUrl: url,
    signingSecrets: [SECRET],
    log: silentLogger,
    listen: false,
    ...options,
  });
}

/** Pending alerts as a commit writes them (one INSERT: its trigger NOTIFYs at commit); returns their keys. */
async function commitAlerts(consumerId: string, count: number): Promise<string[]> {
  const eventIds = Array.from({ length: count }, (_, i) => `ev-${consumerId}-${i}`);
  await db.pool.query(
    `INSERT INTO outbox (consumer_id, idempotency_key, event_id, action, payload)
     SELECT $1, 'whale_alert:' || id, id, 'whale_alert', jsonb_build_object('eventId', id, 'notional', '50000')
       FROM unnest($2::text[]) AS id`,
    [consumerId, eventIds],
  );
  return eventIds.map((id) => `whale_alert:${id}`);
}

async function statusOf(consumerId: string): Promise<Record<string, string>> {
  const { rows } = await db.pool.query<{ idempotency_key: string; status: string }>(
    'SELECT idempotency_key, status FROM outbox WHERE consumer_id = $1',
    [consumerId],
  );
  return Object.fromEntries(rows.map((r) => [r.idempotency_key, r.status]));
}

describe('outbox dispatcher', () => {
  it("is woken by the commit's NOTIFY: an alert is POSTed long before the next poll", async () => {
    const consumerId = `notify-${randomUUID()}`;
    const webhook = await receiver();
    // A poll a minute apart: only the notification can bring the alert out in time.
    const listening = dispatcher(webhook.url, { listen: true, idleMs: 60_000 });
    open.dispatchers.push(listening);
    listening.start();
    // The dispatcher's first round finds nothing, then it sleeps on the notification.
    await new Promise((resolveSoon) => setImmediate(resolveSoon));
    const [key] = await commitAlerts(consumerId, 1);
    await waitFor(() => Promise.resolve(webhook.alerts.length === 1), {
      description: 'the alert, woken by NOTIFY',
      timeoutMs: 10_000,
    });
    expect(webhook.alerts[0]).toMatchObject({ id: key, alert: { idempotencyKey: key, action: 'whale_alert' } });
    expect(webhook.deliveries).toEqual([{ id: key, key, status: 204 }]);
    await waitFor(async () => (await statusOf(consumerId))[key!] === 'done', {
      description: 'the row completed',
      timeoutMs: 10_000,
    });
  });

  it('two dispatchers with short leases deliver every alert and never POST one key at the same time', async () => {
    const consumerId = `pair-${randomUUID()}`;
    // 0-90 ms per call (pseudo-random, fixed per key and attempt), against a 100 ms timeout and so a 300 ms
    // lease: a dispatcher's queue outlives some claims, which must then be given back, not sent late.
    const webhook = await receiver((id, nth) => ({ delayMs: (hash(`${id}:${nth}`) % 10) * 10 }));
    const keys = await commitAlerts(consumerId, 240);
    const pair = [0, 1].map(() => dispatcher(webhook.url, { concurrency: 4, webhookTimeoutMs: 100, idleMs: 20 }));
    open.dispatchers.push(...pair);
    for (const d of pair) d.start();
    await waitFor(async () => Object.values(await statusOf(consumerId)).every((status) => status === 'done'), {
      description: 'every alert done',
      timeoutMs: 60_000,
    });
    expect(webhook.overlaps).toEqual([]);
    expect(new Set(webhook.alerts.map((a) => a.id))).toEqual(new Set(keys));
    // Every delivery of a key carries it as webhook-id and Idempotency-Key alike.
    expect(webhook.deliveries.every((d) => d.id === d.key)).toBe(true);
  });

  it('retries a failing or hanging receiver with the same key, parks dead rows with their error, and sends one again on retry', async () => {
    const consumerId = `faults-${randomUUID()}`;
    const [flaky, hangs, refuses] = await commitAlerts(consumerId, 3);
    let refusing = true;
    const webhook = await receiver((id, nth) => {
      if (id === flaky) return nth <= 2 ? { status: 500 } : {};
      if (id === hangs) return 'hang';
      return refusing ? { status: 400 } : {};
    });
    const dispatch = dispatcher(webhook.url, { maxAttempts: 3, webhookTimeoutMs: 200 });
    const dueNow = () =>
      db.pool.query(`UPDATE outbox SET available_at = now() WHERE consumer_id = $1 AND status = 'pending'`, [
        consumerId,
      ]);

    await dispatch.drain();
    expect(await statusOf(consumerId)).toEqual({ [flaky!]: 'pending', [hangs!]: 'pending', [refuses!]: 'dead' });
    // The backoff is in the database: nothing is due until it passes (moved here instead of waited for).
    await dispatch.drain();
    expect(webhook.deliveries).toHaveLength(3);
    for (let attempt = 2; attempt <= 3; attempt++) {
      await dueNow();
      await dispatch.drain();
    }
    expect(await statusOf(consumerId)).toEqual({ [flaky!]: 'done', [hangs!]: 'dead', [refuses!]: 'dead' });
    expect(webhook.deliveries.filter((d) => d.id === flaky).map((d) => d.status)).toEqual([500, 500, 204]);
    // The hanging receiver's calls were given up at the timeout, one after another.
    expect(webhook.deliveries.filter((d) => d.id === hangs).map((d) => d.status)).toEqual([0, 0, 0]);

    const dead = await listOutbox(db.pool, { consumerId, state: 'dead', limit: 10 });
    expect(dead.map((row) => [row.idempotencyKey, row.attempts, row.lastError])).toEqual([
      [refuses, 1, expect.stringMatching(/answered HTTP 400$/) as unknown],
      [hangs, 3, expect.stringMatching(/no answer within 200 ms$/) as unknown],
    ]);
    // The operator's view: both dead rows with their errors, and never the secret part of the webhook URL.
    const listed = await cli('alerts', 'list', '--consumer', consumerId, '--state', 'dead');
    expect(listed.code).toBe(0);
    expect(listed.stdout).toContain(refuses);
    expect(listed.stdout).toContain('answered HTTP 400');
    expect(listed.stdout).toContain('no answer within 200 ms');
    expect(listed.stdout).not.toMatch(/s3cr3t/);
    for (const row of dead) expect(row.lastError).not.toMatch(/s3cr3t/);

    // The receiver is fixed; the operator sends the refused alert again: same key, attempts from zero, audited.
    refusing = false;
    const retried = await cli(
      ...['alerts', 'retry', '--id', String(dead[0]!.id), '--actor', 'ops@example', '--reason', 'receiver fixed'],
    );
    expect(retried, retried.stderr).toMatchObject({ code: 0 });
    await dispatch.drain();
    expect((await statusOf(consumerId))[refuses!]).toBe('done');
    expect(webhook.deliveries.filter((d) => d.id === refuses).map((d) => [d.key, d.status])).toEqual([
      [refuses, 400],
      [refuses, 204],
    ]);
    const audit = await db.pool.query<{ kind: string; decision: string; actor: string; details: unknown }>(
      'SELECT kind, decision, actor, details FROM decisions WHERE consumer_id = $1',
      [consumerId],
    );
    expect(audit.rows).toEqual([
      {
        kind: 'alert',
        decision: 'retry',
        actor: 'ops@example',
        details: { alerts: [{ id: dead[0]!.id, key: refuses, from: 'dead' }] },
      },
    ]);
  });
});

/** `whalehunt-consumer …` as an operator runs it (cli/main.ts), on this file's database. */
async function cli(...argv: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const io = { out: (text: string) => void out.push(text), err: (text: string) => void err.push(text) };
  const code = await main(argv, { DATABASE_URL: db.url }, io);
  return { code, stdout: out.join('\n'), stderr: err.join('\n') };
}

/** A small stable hash (FNV-1a) for the receiver's pseudo-random delays. */
function hash(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193) >>> 0;
  return h;
}
